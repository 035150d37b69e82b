//! Who may read what a replay draws from a recording (issue 15, attack findings X-1 and Y-2):
//! the scenario a replay makes of a recorded task, a replay's outputs and a shadow evaluation's
//! divergences are the recording's values, so only the recording's principal (by identity) or
//! an admin reads them; a viewer of the tenant sees counts.

use corral_guard::Caller;
use corral_lab::service::{InputBody, PageQuery, ReplayBody};
use corral_policy::Principal;
use serde_json::json;

use crate::recorded::{Fixture, fixture, olga, read_recorded};

fn vera() -> Caller {
    Caller::new(Principal::new("vera", &["viewer"]))
}

fn admin() -> Caller {
    Caller::new(Principal::new("root", &["admin"]))
}

const SECRET: &str = "customer 4111-1111-1111-1111, api key sk-live-attack-x";

/// olga's live session `run` (one read of `notes.txt`) with a secret task input.
async fn session_with_secret_input(f: &Fixture, run: &str) {
    std::fs::write(f.root.join("notes.txt"), "hello").unwrap();
    read_recorded(f, &olga(), run, &f.root.join("notes.txt")).await;
    f.lab
        .set_recording_input(
            &olga(),
            "rid",
            run,
            InputBody {
                steps: json!([{"input": SECRET, "expected": "refund approved"}]),
            },
        )
        .await
        .unwrap();
}

/// Regression (attack finding X-1): a variant replay copied a live session's task input into a
/// new tenant scenario that any viewer could read.
#[tokio::test]
async fn a_viewer_cannot_read_a_live_sessions_task_input_through_the_scenario_its_replay_creates() {
    let f = fixture(false).await;
    session_with_secret_input(&f, "task-x1").await;
    let e = f
        .lab
        .get_recording(&vera(), "rid", "task-x1", None)
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.forbidden");
    let replay = f
        .lab
        .replay(
            &olga(),
            "rid",
            "task-x1",
            ReplayBody {
                variant: Some("identity".to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap();
    let run_id = replay.run.unwrap().id;
    let run = f.lab.get_run(&vera(), "rid", &run_id).await.unwrap();
    let seen = f
        .lab
        .get_scenario(&vera(), "rid", &run.scenario_id)
        .await
        .map(|s| serde_json::to_string(&s).unwrap());
    match seen {
        Err(e) => assert_eq!(e.code, "recording.forbidden", "{}", e.message),
        Ok(text) => assert!(
            !text.contains("sk-live-attack-x"),
            "a viewer read the recording's task input through the replay's scenario: {text}"
        ),
    }
}

#[tokio::test]
async fn the_scenario_of_a_replay_is_listed_and_read_only_by_the_recordings_principal_or_an_admin()
{
    let f = fixture(false).await;
    session_with_secret_input(&f, "task-x5").await;
    let replay = f
        .lab
        .replay(
            &olga(),
            "rid",
            "task-x5",
            ReplayBody {
                variant: Some("identity".to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap();
    let scenario = replay.run.unwrap().scenario_id;
    let listed = |c: Caller| {
        let lab = &f.lab;
        async move {
            lab.list_scenarios(&c, "rid", &PageQuery::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|s| s.id)
                .collect::<Vec<_>>()
        }
    };
    assert!(!listed(vera()).await.contains(&scenario));
    assert!(listed(olga()).await.contains(&scenario));
    assert!(listed(admin()).await.contains(&scenario));
    // Read by the owner and an admin; another operator can neither read nor run it.
    let steps = f.lab.get_scenario(&olga(), "rid", &scenario).await.unwrap();
    assert!(steps.steps.to_string().contains("sk-live-attack-x"));
    f.lab
        .get_scenario(&admin(), "rid", &scenario)
        .await
        .unwrap();
    let oscar = Caller::new(Principal::new("oscar", &["operator"]));
    let e = f
        .lab
        .run(
            &oscar,
            "rid",
            &scenario,
            corral_lab::service::RunBody {
                variant: "copy".to_owned(),
                ..Default::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.forbidden", "{}", e.message);
}

/// Regression (issue 15): a replay run's outputs were checked by the principal's id, so a JWT
/// whose `sub` is `bot` read the outputs of the static token `bot`'s replay (here of a recorded
/// lab run, whose replay runs on the tenant's own scenario).
#[tokio::test]
async fn a_jwt_whose_subject_names_a_static_token_cannot_read_that_tokens_replay_outputs() {
    use corral_policy::{PrincipalKind, PrincipalOrigin};
    let f = fixture(true).await;
    let bot = |origin: PrincipalOrigin| {
        Caller::new(
            Principal::new("bot", &["operator"])
                .with_kind(PrincipalKind::Service)
                .with_origin(origin),
        )
    };
    let token_bot = bot(PrincipalOrigin::StaticToken);
    let jwt_bot = bot(PrincipalOrigin::Jwt {
        issuer: "https://idp.example".to_owned(),
    });
    let scenario = crate::recorded::lookups(&f.lab).await;
    let identity = corral_lab::service::RunBody {
        variant: "identity".to_owned(),
        ..Default::default()
    };
    let original = f
        .lab
        .run(&token_bot, "rid", &scenario, identity)
        .await
        .unwrap();
    let replay = f
        .lab
        .replay(
            &token_bot,
            "rid",
            &original.id,
            ReplayBody {
                variant: Some("identity".to_owned()),
                ..ReplayBody::default()
            },
        )
        .await
        .unwrap();
    let run = replay.run.unwrap();
    assert_eq!(
        run.scenario_id, scenario,
        "the replay runs the tenant's scenario"
    );
    let own = f.lab.outputs(&token_bot, "rid", &run.id).await.unwrap();
    assert!(own.iter().any(|o| o.output.contains("alpha")), "{own:?}");
    let e = f.lab.outputs(&jwt_bot, "rid", &run.id).await.unwrap_err();
    assert_eq!(e.code, "recording.forbidden", "{}", e.message);
    f.lab.outputs(&admin(), "rid", &run.id).await.unwrap();
}
