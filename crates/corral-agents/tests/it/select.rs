//! Adapter selection in the six-case order, and the session's `environment`.

use corral_agents::{Adapter, AdapterAsk, Mounted, codes, environment_workdir, select};
use serde_json::json;

fn names(n: &[&str]) -> Vec<String> {
    n.iter().map(|s| (*s).to_owned()).collect()
}

#[test]
fn the_path_wins_over_the_header_the_model_and_the_default() {
    let both = names(&["codex", "claude_code"]);
    let m = Mounted {
        adapters: &both,
        default: Some("codex"),
    };
    let ask = AdapterAsk {
        path: Some("claude_code"),
        header: Some("codex"),
        model: Some("codex"),
    };
    let s = select(&ask, &m).unwrap();
    assert_eq!((s.adapter, s.by), (Adapter::ClaudeCode, "path"));
    // `model` named an adapter: never a real model for the CLI, which gets its default.
    assert_eq!(s.model, None);
}

#[test]
fn the_header_chooses_when_the_path_does_not_and_a_real_model_goes_to_the_cli() {
    let both = names(&["codex", "claude_code"]);
    let m = Mounted {
        adapters: &both,
        default: Some("codex"),
    };
    let ask = AdapterAsk {
        path: None,
        header: Some("claude_code"),
        model: Some("claude-sonnet-4-5"),
    };
    let s = select(&ask, &m).unwrap();
    assert_eq!((s.adapter, s.by), (Adapter::ClaudeCode, "header"));
    assert_eq!(s.model.as_deref(), Some("claude-sonnet-4-5"));
}

#[test]
fn a_model_equal_to_an_adapters_name_chooses_it_and_leaves_the_cli_its_default_model() {
    let both = names(&["codex", "claude_code"]);
    let m = Mounted {
        adapters: &both,
        default: Some("codex"),
    };
    let ask = AdapterAsk {
        model: Some("claude_code"),
        ..AdapterAsk::default()
    };
    let s = select(&ask, &m).unwrap();
    assert_eq!(
        (s.adapter, s.by, s.model),
        (Adapter::ClaudeCode, "model", None)
    );
}

#[test]
fn the_configs_default_chooses_when_the_request_names_no_adapter() {
    let both = names(&["codex", "claude_code"]);
    let m = Mounted {
        adapters: &both,
        default: Some("claude_code"),
    };
    let ask = AdapterAsk {
        model: Some("gpt-5-codex"),
        ..AdapterAsk::default()
    };
    let s = select(&ask, &m).unwrap();
    assert_eq!((s.adapter, s.by), (Adapter::ClaudeCode, "default"));
    assert_eq!(s.model.as_deref(), Some("gpt-5-codex"));
}

#[test]
fn the_only_mounted_adapter_chooses_when_there_is_no_default() {
    let one = names(&["codex"]);
    let m = Mounted {
        adapters: &one,
        default: None,
    };
    let s = select(&AdapterAsk::default(), &m).unwrap();
    assert_eq!((s.adapter, s.by, s.model), (Adapter::Codex, "only", None));
}

#[test]
fn with_several_adapters_no_default_and_no_hint_the_request_is_refused_adapter_required() {
    let both = names(&["codex", "claude_code"]);
    let m = Mounted {
        adapters: &both,
        default: None,
    };
    let e = select(
        &AdapterAsk {
            model: Some("gpt-5"),
            ..AdapterAsk::default()
        },
        &m,
    )
    .unwrap_err();
    assert_eq!(e.code, codes::AGENTS_ADAPTER_REQUIRED);
    assert!(e.message.contains("X-Corral-Adapter"), "{}", e.message);
    assert_eq!(corral_policy::codes::status(e.code), 400);
    // Nothing mounted: refused the same way, the message says so.
    let none = select(&AdapterAsk::default(), &Mounted::default()).unwrap_err();
    assert_eq!(none.code, codes::AGENTS_ADAPTER_REQUIRED);
    assert!(none.message.contains("none"), "{}", none.message);
}

#[test]
fn a_path_or_header_naming_an_adapter_the_server_does_not_mount_is_refused_with_the_mounted_list() {
    let one = names(&["codex"]);
    let m = Mounted {
        adapters: &one,
        default: None,
    };
    for ask in [
        AdapterAsk {
            path: Some("claude_code"),
            ..AdapterAsk::default()
        },
        AdapterAsk {
            header: Some("gemini\u{1b}[31m"),
            ..AdapterAsk::default()
        },
    ] {
        let e = select(&ask, &m).unwrap_err();
        assert_eq!(e.code, codes::AGENTS_ADAPTER_REQUIRED);
        assert!(e.message.contains("it mounts: codex"), "{}", e.message);
        assert!(
            !e.message.contains('\u{1b}'),
            "escapes are cleaned: {:?}",
            e.message
        );
    }
}

#[test]
fn a_self_hosted_environment_gives_its_workspace_directory_and_any_other_type_is_refused() {
    let env = json!({"type": "self_hosted", "workspace_directory": "/workspace/app"});
    assert_eq!(
        environment_workdir(Some(&env)).unwrap().unwrap(),
        std::path::PathBuf::from("/workspace/app")
    );
    assert_eq!(environment_workdir(None).unwrap(), None);
    assert_eq!(
        environment_workdir(Some(&json!({"type": "self_hosted"}))).unwrap(),
        None
    );
    let cloud = environment_workdir(Some(&json!({"type": "cloud"}))).unwrap_err();
    assert_eq!(cloud.code, codes::AGENTS_ENVIRONMENT_UNSUPPORTED);
    assert!(cloud.message.contains("corral hosts agents itself"));
    for bad in [
        json!({"workspace_directory": "relative/dir"}),
        json!("self_hosted"),
    ] {
        assert_eq!(
            environment_workdir(Some(&bad)).unwrap_err().code,
            codes::AGENTS_INVALID
        );
    }
}
