//! Activation: the strict flag, the entry-point refusal, every missing precondition named.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use corral_learn::gate::{self, Facts, Precondition};
use corral_policy::AutonomyLevel;
use corral_policy::codes;

fn ready() -> Facts {
    Facts {
        auth_configured: true,
        open_mode: false,
        manifest_valid: true,
        autonomy: AutonomyLevel::L2,
        audit_on: true,
    }
}

#[test]
fn the_flag_is_true_false_or_unset() {
    assert_eq!(gate::flag(None), Ok(false));
    assert_eq!(gate::flag(Some(OsStr::new("true"))), Ok(true));
    assert_eq!(gate::flag(Some(OsStr::new("false"))), Ok(false));
    for bad in ["", "1", "0", "TRUE", "True", "yes", "on", " true", "true\n"] {
        let err = gate::flag(Some(OsStr::new(bad))).unwrap_err();
        assert_eq!(err.code, codes::LEARNING_FLAG_INVALID, "{bad:?}");
        assert!(err.to_string().contains("CORRAL_LEARNING_MODE"));
    }
    assert!(gate::flag(Some(OsStr::from_bytes(b"tr\xffue"))).is_err());
}

#[test]
fn every_entry_point_but_serve_refuses_the_flag() {
    assert_eq!(gate::refuse_outside_serve(None), Ok(()));
    assert_eq!(
        gate::refuse_outside_serve(Some(OsStr::new("false"))),
        Ok(())
    );
    let err = gate::refuse_outside_serve(Some(OsStr::new("true"))).unwrap_err();
    assert_eq!(err.code, codes::LEARNING_NOT_THIS_ENTRY_POINT);
    assert!(err.to_string().contains("corral serve"), "{err}");
    let err = gate::refuse_outside_serve(Some(OsStr::new("yes"))).unwrap_err();
    assert_eq!(err.code, codes::LEARNING_FLAG_INVALID);
}

#[test]
fn the_grace_period_is_whole_seconds_an_hour_by_default() {
    assert_eq!(gate::grace(None), Ok(Duration::from_secs(3600)));
    assert_eq!(gate::grace(Some(OsStr::new("0"))), Ok(Duration::ZERO));
    assert_eq!(
        gate::grace(Some(OsStr::new("90"))),
        Ok(Duration::from_secs(90))
    );
    for bad in ["", "-1", "1.5", "1h", " 60", "99999999999999999999999"] {
        let err = gate::grace(Some(OsStr::new(bad))).unwrap_err();
        assert_eq!(err.code, codes::LEARNING_GRACE_INVALID, "{bad:?}");
    }
}

#[test]
fn all_preconditions_met_means_nothing_is_missing() {
    assert!(gate::missing(&ready()).is_empty());
    let lower = Facts {
        autonomy: AutonomyLevel::L0,
        ..ready()
    };
    assert!(gate::missing(&lower).is_empty());
}

#[test]
fn each_precondition_missing_on_its_own_is_named() {
    let cases = [
        (
            Facts {
                auth_configured: false,
                ..ready()
            },
            Precondition::Auth,
            codes::LEARNING_PRECONDITION_AUTH,
        ),
        (
            Facts {
                open_mode: true,
                ..ready()
            },
            Precondition::NotOpenMode,
            codes::LEARNING_PRECONDITION_OPEN_MODE,
        ),
        (
            Facts {
                manifest_valid: false,
                ..ready()
            },
            Precondition::Manifest,
            codes::LEARNING_PRECONDITION_MANIFEST,
        ),
        (
            Facts {
                autonomy: AutonomyLevel::L3,
                ..ready()
            },
            Precondition::Autonomy,
            codes::LEARNING_PRECONDITION_AUTONOMY,
        ),
        (
            Facts {
                audit_on: false,
                ..ready()
            },
            Precondition::Audit,
            codes::LEARNING_PRECONDITION_AUDIT,
        ),
    ];
    for (facts, want, code) in cases {
        let missing = gate::missing(&facts);
        assert_eq!(missing, vec![want]);
        assert_eq!(want.code(), code);
        let shown = want.to_string();
        assert!(
            shown.starts_with(&format!("error[{code}]: learning mode needs ")),
            "{shown}"
        );
        assert!(codes::lookup(code).is_some());
    }
}

#[test]
fn every_missing_precondition_is_named_at_once() {
    let none = Facts {
        auth_configured: false,
        open_mode: true,
        manifest_valid: false,
        autonomy: AutonomyLevel::L4,
        audit_on: false,
    };
    assert_eq!(
        gate::missing(&none),
        vec![
            Precondition::Auth,
            Precondition::NotOpenMode,
            Precondition::Manifest,
            Precondition::Autonomy,
            Precondition::Audit
        ]
    );
}
