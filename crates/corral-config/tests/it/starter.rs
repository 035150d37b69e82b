//! The starter configs `corral init` writes load, and lint clean (full_access excepted).

use corral_config::{Severity, lint, starter};
use corral_policy::codes;
use corral_policy::presets::{PRESET_NAMES, Preset};

use crate::{list, the};

const ROOT: &str = "/tmp/ws";

fn starter_for(name: &str) -> (Preset, String) {
    let preset = Preset::parse(name).unwrap_or_else(|e| panic!("{name}: {e}"));
    (preset, starter::starter(preset, ROOT))
}

#[test]
fn every_preset_starter_loads_without_errors() {
    for name in PRESET_NAMES {
        let (preset, text) = starter_for(name);
        let loaded = crate::load(&text);
        assert_eq!(loaded.config.presets.len(), 1, "{name}");
        assert_eq!(loaded.config.presets[0].preset, preset, "{name}");
        if preset.needs_root() {
            assert_eq!(
                loaded.config.root.as_ref().map(|r| r.value.as_str()),
                Some(ROOT),
                "{name}"
            );
        }
    }
}

#[test]
fn every_starter_names_its_preset_and_says_how_to_check_it() {
    for name in PRESET_NAMES {
        let (_, text) = starter_for(name);
        assert!(
            text.contains(&format!("corral init --preset {name}")),
            "{text}"
        );
        assert!(text.contains("corral check-config --strict"), "{text}");
    }
}

#[test]
fn the_starters_without_exec_are_strict_clean() {
    for name in PRESET_NAMES {
        let (preset, text) = starter_for(name);
        if matches!(
            preset,
            Preset::CommandsOnly | Preset::CiRunner | Preset::FullAccess | Preset::AgentHost
        ) {
            continue;
        }
        let findings = lint::lint(&crate::load(&text));
        assert!(
            !lint::fails(&findings, true),
            "{name} is not strict clean:\n{}",
            list(&findings)
        );
        the(&findings, codes::LINT_OPEN_MODE, Severity::Note);
        assert!(
            text.contains("token_env"),
            "the starter shows how to add a token"
        );
    }
}

#[test]
fn the_starters_that_run_commands_require_a_token_and_are_strict_clean() {
    for preset in [Preset::CommandsOnly, Preset::CiRunner, Preset::AgentHost] {
        let text = starter::starter(preset, ROOT);
        let loaded = crate::load(&text);
        assert_eq!(loaded.tokens.len(), 1, "{}", preset.name());
        assert_eq!(loaded.tokens[0].principal.id, "agent");
        let findings = lint::lint(&loaded);
        assert!(
            !lint::fails(&findings, true),
            "{} is not strict clean:\n{}",
            preset.name(),
            list(&findings)
        );
    }
}

#[test]
fn the_full_access_starter_is_reported_as_full_access() {
    let (_, text) = starter_for("full_access");
    let findings = lint::lint(&crate::load(&text));
    let d = the(&findings, codes::LINT_FULL_ACCESS, Severity::Error);
    assert_eq!(
        d.span.map(|s| s.line),
        Some(crate::line_of(&text, "name: full_access"))
    );
    assert!(lint::fails(&findings, false));
}

#[test]
fn a_starter_without_its_token_variable_does_not_load() {
    let text = starter::starter(Preset::CommandsOnly, ROOT);
    let empty = std::collections::HashMap::<String, String>::new();
    let e = corral_config::load_str(
        "corral.yaml",
        &text,
        std::path::Path::new(crate::BASE),
        &empty,
    )
    .unwrap_err();
    let d = the(
        &e.diagnostics,
        codes::CONFIG_TOKEN_ENV_UNSET,
        Severity::Error,
    );
    assert!(d.fix.contains("export CORRAL_AGENT_TOKEN="), "{d}");
}
