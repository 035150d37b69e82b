//! Shadow evaluation's refusals and honesty (issue 15 items 3-5), beside spec 001's steps in
//! `it_sandboxed_replay.rs`: an external program is checked by its declared `tools:` (none
//! declared: ineligible), a recording is replayed only by who may read it, and a recording whose
//! timeline cannot be put in order is reported degraded, never compared.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use corral_exec::mock::MockBackend;
use corral_guard::audit::AuditSink;
use corral_guard::recording::RecordingKey;
use corral_guard::runs::RunPurpose;
use corral_guard::{Call, Caller, Gateway, Reply};
use corral_lab::program::{ProgramSpec, Programs};
use corral_lab::service::{LabService, PageQuery, VariantBody};
use corral_lab::shadow::ShadowBody;
use corral_policy::{Principal, codes};
use corral_store::Store;
use serde_json::json;

use crate::support;

struct Fixture {
    _dir: tempfile::TempDir,
    root: PathBuf,
    store: Arc<Store>,
    gateway: Arc<Gateway>,
    lab: LabService,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(
        Store::connect(&Store::default_sqlite_url(dir.path()))
            .await
            .unwrap(),
    );
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("a.txt"), "real a").unwrap();
    let yaml = format!(
        "version: 1\nrules:\n  - allow: [files.read, files.write]\n    paths: {{roots: [{}]}}\n",
        root.display()
    );
    let gateway = Arc::new(
        Gateway::new(
            support::deployment(&yaml, dir.path()),
            Arc::new(MockBackend::default()),
            vec![Arc::new(support::Recorded::default()) as Arc<dyn AuditSink>],
            "default",
        )
        .with_recorder(Arc::new(corral_store::RecordingWriter::spawn(&store))),
    );
    let lab = LabService::new(store.clone(), gateway.clone(), true);
    Fixture {
        _dir: dir,
        root,
        store,
        gateway,
        lab,
    }
}

fn ada() -> Caller {
    Caller::new(support::ada())
}

impl Fixture {
    /// A live session `run` of ada's: one real read of `a.txt`, and its task input.
    async fn record(&self, run: &str) {
        let reply = self
            .gateway
            .call(Call {
                caller: ada().with_run(Some(run.to_owned())).with_record(true),
                op: "files.read".to_owned(),
                args: json!({"path": self.root.join("a.txt").display().to_string()}),
                request_id: format!("{run}-1"),
            })
            .await;
        assert!(matches!(reply, Reply::Json(_)), "{reply:?}");
        self.store
            .set_recording_input(&key(run), &json!({"steps": [{"input": "a"}]}), 0)
            .await
            .unwrap();
    }

    fn reader(&self) -> VariantBody {
        VariantBody {
            variant: "reader".to_owned(),
            workflow: Some(format!(
                "name: r\nversion: 1\nsteps:\n  - op: files.read\n    args: {{path: \"{}/{{{{input}}}}.txt\"}}\n    as: s0\noutput: \"{{{{steps.s0.content}}}}\"\n",
                self.root.display()
            )),
            program: None,
        }
    }

    fn programs(&self, tools: Option<&[&str]>) {
        let spec = ProgramSpec {
            name: "agent".to_owned(),
            argv: vec!["/bin/true".to_owned()],
            cwd: PathBuf::from("/"),
            read_paths: Vec::new(),
            timeout: Duration::from_secs(5),
            memory: None,
            processes: None,
            protected: Vec::new(),
            tools: tools.map(|t| t.iter().map(|s| (*s).to_owned()).collect()),
        };
        self.lab.set_programs(Programs {
            agents: BTreeMap::from([("agent".to_owned(), Arc::new(spec))]),
            scorers: BTreeMap::new(),
            judges: BTreeMap::new(),
            backend: None,
        });
    }

    async fn nothing_ran(&self) {
        let runs = self
            .lab
            .list_runs(&ada(), "rid", None, &PageQuery::default())
            .await
            .unwrap();
        assert!(runs.items.is_empty(), "{:?}", runs.items);
        let shadows = self
            .lab
            .list_shadows(&ada(), "rid", &PageQuery::default())
            .await
            .unwrap();
        assert!(shadows.items.is_empty());
    }
}

fn key(run: &str) -> RecordingKey {
    RecordingKey {
        tenant: "default".to_owned(),
        run_id: run.to_owned(),
        identity: support::ada().identity(),
        principal: "ada".to_owned(),
        purpose: RunPurpose::Live,
    }
}

fn body(variants: Vec<VariantBody>) -> ShadowBody {
    ShadowBody {
        tasks: vec!["task-1".to_owned()],
        variants,
        ..ShadowBody::default()
    }
}

fn program() -> VariantBody {
    VariantBody {
        variant: "external".to_owned(),
        workflow: None,
        program: Some("agent".to_owned()),
    }
}

#[tokio::test]
async fn a_program_with_no_tools_list_is_ineligible_for_shadow_evaluation_naming_it() {
    let f = fixture().await;
    f.record("task-1").await;
    f.programs(None);
    let e = f
        .lab
        .shadow(&ada(), "rid", body(vec![f.reader(), program()]))
        .await
        .unwrap_err();
    assert_eq!(e.code, codes::REPLAY_TOOLS_UNDECLARED);
    assert!(e.message.contains("variant `external`"), "{}", e.message);
    assert!(e.message.contains("`tools:`"), "{}", e.message);
    f.nothing_ran().await;
}

#[tokio::test]
async fn a_program_whose_tools_list_names_an_unsafe_op_is_rejected_before_anything_runs() {
    let f = fixture().await;
    f.record("task-1").await;
    f.programs(Some(&["files.read", "files.write"]));
    let e = f
        .lab
        .shadow(&ada(), "rid", body(vec![f.reader(), program()]))
        .await
        .unwrap_err();
    assert_eq!(e.code, codes::REPLAY_UNSAFE_OP);
    assert!(e.message.contains("`files.write`"), "{}", e.message);
    f.nothing_ran().await;
}

#[tokio::test]
async fn the_identity_agent_is_no_shadow_variant() {
    let f = fixture().await;
    f.record("task-1").await;
    let identity = VariantBody {
        variant: "identity".to_owned(),
        ..VariantBody::default()
    };
    let e = f
        .lab
        .shadow(&ada(), "rid", body(vec![identity]))
        .await
        .unwrap_err();
    assert_eq!(e.code, codes::REPLAY_VARIANT_INVALID);
    f.nothing_ran().await;
}

#[tokio::test]
async fn another_operator_cannot_replay_a_recording_they_may_not_read_and_a_viewer_cannot_run_one()
{
    let f = fixture().await;
    f.record("task-1").await;
    let bob = Caller::new(Principal::new("bob", &["operator"]));
    let e = f
        .lab
        .shadow(&bob, "rid", body(vec![f.reader()]))
        .await
        .unwrap_err();
    assert_eq!(e.code, codes::RECORDING_FORBIDDEN);
    let vic = Caller::new(Principal::new("vic", &["viewer"]));
    let e = f
        .lab
        .shadow(&vic, "rid", body(vec![f.reader()]))
        .await
        .unwrap_err();
    assert_eq!(e.code, codes::RBAC_DENIED);
    f.nothing_ran().await;
    // An admin may replay anyone's recording.
    let root = Caller::new(Principal::new("root", &["admin"]));
    let s = f
        .lab
        .shadow(&root, "rid", body(vec![f.reader()]))
        .await
        .unwrap();
    assert_eq!(s.status, "completed");
}

#[tokio::test]
async fn a_gapped_recording_is_replayed_from_its_input_and_reported_degraded_not_compared() {
    let f = fixture().await;
    f.record("task-1").await;
    f.store
        .mark_recording_gapped(&key("task-1"), 0)
        .await
        .unwrap();
    let s = f
        .lab
        .shadow(&ada(), "rid", body(vec![f.reader()]))
        .await
        .unwrap();
    let run = &s.report["runs"][0];
    assert_eq!(run["timeline"], "degraded", "{run}");
    assert!(
        run["degraded"].as_str().unwrap().contains("gapped"),
        "{run}"
    );
    assert_eq!(run["divergence"], json!(null));
    // The task still ran, from its input.
    assert_eq!(
        (run["steps_total"].as_u64(), run["steps_ok"].as_u64()),
        (Some(1), Some(1))
    );
}

/// Regression (attack finding Y-2): a viewer reading a shadow evaluation saw each run's
/// divergence, `{op, args_hash}` of the recorded call, an unsalted hash of a recorded value
/// (a small value is guessed by hashing candidates). Only the recording's principal or an
/// admin sees it; anyone else sees whether the run diverged.
#[tokio::test]
async fn a_viewer_reading_a_shadow_evaluation_sees_whether_runs_diverged_but_not_the_recorded_calls()
 {
    let f = fixture().await;
    std::fs::write(f.root.join("pin.txt"), "1234").unwrap();
    let reply = f
        .gateway
        .call(Call {
            caller: ada().with_run(Some("task-1".to_owned())).with_record(true),
            op: "files.read".to_owned(),
            args: json!({"path": f.root.join("pin.txt").display().to_string()}),
            request_id: "task-1-1".to_owned(),
        })
        .await;
    assert!(matches!(reply, Reply::Json(_)), "{reply:?}");
    f.store
        .set_recording_input(&key("task-1"), &json!({"steps": [{"input": "a"}]}), 0)
        .await
        .unwrap();
    let shadow = f
        .lab
        .shadow(&ada(), "rid", body(vec![f.reader()]))
        .await
        .unwrap();
    let seen = |c: Caller| {
        let (lab, id) = (&f.lab, shadow.id.clone());
        async move { lab.get_shadow(&c, "rid", &id).await.unwrap().report["runs"][0].clone() }
    };
    let own = seen(ada()).await;
    assert_eq!(
        own["divergence"]["recorded"]["op"],
        json!("files.read"),
        "{own}"
    );
    let admin = Caller::new(Principal::new("root", &["admin"]));
    assert_eq!(seen(admin).await["divergence"], own["divergence"]);
    let vera = Caller::new(Principal::new("vera", &["viewer"]));
    let theirs = seen(vera.clone()).await;
    assert_eq!(
        (
            &theirs["divergence"],
            &theirs["diverged"],
            &theirs["withheld"]
        ),
        (&json!(null), &json!(true), &json!(true)),
        "{theirs}"
    );
    let listed = f
        .lab
        .list_shadows(&vera, "rid", &PageQuery::default())
        .await
        .unwrap();
    let text = serde_json::to_string(&listed.items).unwrap();
    assert!(!text.contains("args_hash"), "{text}");
}

/// Regression (issue 15): when several principals recorded one run id, an admin could not
/// name the one meant in a shadow request (`recording.ambiguous`, with no way out); `principal`
/// names it, as `?principal=` does on reads.
#[tokio::test]
async fn an_admin_names_the_recordings_principal_in_a_shadow_request_when_several_recorded_the_id()
{
    let f = fixture().await;
    f.record("task-1").await;
    let bob = Caller::new(Principal::new("bob", &["operator"]));
    let reply = f
        .gateway
        .call(Call {
            caller: bob
                .clone()
                .with_run(Some("task-1".to_owned()))
                .with_record(true),
            op: "files.read".to_owned(),
            args: json!({"path": f.root.join("a.txt").display().to_string()}),
            request_id: "bob-1".to_owned(),
        })
        .await;
    assert!(matches!(reply, Reply::Json(_)), "{reply:?}");
    let admin = Caller::new(Principal::new("root", &["admin"]));
    let e = f
        .lab
        .shadow(&admin, "rid", body(vec![f.reader()]))
        .await
        .unwrap_err();
    assert_eq!(e.code, "recording.ambiguous", "{}", e.message);
    let named = ShadowBody {
        principal: Some(support::ada().identity()),
        ..body(vec![f.reader()])
    };
    let shadow = f.lab.shadow(&admin, "rid", named).await.unwrap();
    assert_eq!((shadow.status.as_str(), shadow.ran), ("completed", 1));
    let by_id = ShadowBody {
        principal: Some("ada".to_owned()),
        ..body(vec![f.reader()])
    };
    f.lab.shadow(&admin, "rid", by_id).await.unwrap();
}
