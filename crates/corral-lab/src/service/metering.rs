//! [`LabService::metering`]: the caller's tenant's runs and calls per purpose (`live`,
//! `simulation`, `replay`, `judge`), as this process counted them since it started (admin;
//! `GET /v1/sandbox/metering`, `corral sandbox metering`). Tokens and spend are `null` until
//! something reports them.

use corral_guard::Caller;
use corral_guard::metering::TenantMetering;
use corral_policy::Role;

use super::{Action, LabError, LabService};

/// Reading the metering, as audited: admin only (it shows the whole tenant's use).
pub(super) const METERING: Action = Action {
    op: "sandbox.metering.get",
    role: Role::Admin,
};

impl LabService {
    /// The tenant's metering per purpose (admin).
    pub async fn metering(&self, caller: &Caller, rid: &str) -> Result<TenantMetering, LabError> {
        let tenant = self.tenant_of(caller);
        let r = self
            .start(&METERING, caller)
            .map(|()| self.gateway().meter().tenant(&tenant));
        self.finish(&METERING, caller, rid, r, None, None).await
    }
}
