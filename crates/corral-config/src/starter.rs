//! The starter config `corral init` writes: commented, valid, and clean under
//! `check-config --strict`.

use corral_policy::presets::Preset;

/// The starter config for a preset and root.
pub fn starter(preset: Preset, root: &str) -> String {
    let mut s = String::new();
    s.push_str(&format!(
        "# corral config: written by `corral init --preset {}`.\n\
         # Check it with `corral check-config --strict`; try calls with `corral explain`.\n\
         version: 1\n\n\
         # A preset is a reviewed starting policy. Nothing else is reachable: default deny.\n",
        preset.name()
    ));
    match preset {
        Preset::CommandsOnly | Preset::CiRunner => {
            s.push_str(&format!(
                "preset:\n  name: {}\n  # Pin every argument you can; `...` means any arguments.\n  commands:\n    - \"pytest ...\"\n",
                preset.name()
            ));
        }
        Preset::FullAccess => {
            s.push_str("preset:\n  name: full_access\n  # full_access disables corral's protections; check-config always reports it.\n  unsafe: true\n");
        }
        Preset::AgentHost => {
            s.push_str(
                "preset:\n  name: agent_host\n  # What the agents may change in the root: read-only (the default) or\n  # workspace-write. Path scopes of other rules never confine an agent.\n  permissions: read-only\n\n# The coding agents to host: codex, claude_code.\nagents: [codex]\n",
            );
        }
        Preset::Minimal
        | Preset::FilesReadonly
        | Preset::Readonly
        | Preset::DownloadOnly
        | Preset::WorkspaceJail => {
            s.push_str(&format!("preset: {}\n", preset.name()));
        }
    }
    if preset.needs_root() {
        s.push_str(&format!(
            "\n# The directory the preset confines file ops (and commands) to. Never `/`.\nroot: {root}\n"
        ));
    }
    s.push_str(
        "\n# More rules: deny always beats allow. Example (uncomment to use):\n\
         # rules:\n\
         #   - deny: [files.delete]\n\
         #     reason: \"agents may not delete files\"\n",
    );
    let exec = matches!(
        preset,
        Preset::CommandsOnly | Preset::CiRunner | Preset::FullAccess | Preset::AgentHost
    );
    if exec {
        s.push_str(
            "\n# This preset runs commands, so callers must authenticate. The secret lives in the\n\
             # environment: export CORRAL_AGENT_TOKEN=$(openssl rand -hex 24)\n\
             auth:\n  tokens:\n    - id: agent\n      roles: [operator]\n      token_env: CORRAL_AGENT_TOKEN\n",
        );
    } else {
        s.push_str(
            "\n# Without tokens the server is in open mode: loopback only, and refused when exec or\n\
             # admin ops are mounted. To require a token (secret in the environment):\n\
             # auth:\n\
             #   tokens:\n\
             #     - id: agent\n\
             #       roles: [operator]\n\
             #       token_env: CORRAL_AGENT_TOKEN\n",
        );
    }
    s
}
