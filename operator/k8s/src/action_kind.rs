//! The bounded kinds of [`crate::actions::Action`]: metric labels and retry policy. Below both
//! the actions and the metrics, so each imports it and neither imports the other for it.

/// Every kind of action, for metrics labels and retry policy.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionKind {
    CreatePod,
    DeletePod,
    CreateRemotePod,
    DeleteRemotePod,
    CreateRemoteCopy,
    DeleteRemoteCopy,
    ApplyRemoteSecret,
    DeleteRemoteSecret,
    EvictPod,
    ApplyStatus,
    Publish,
    Launch,
    Cordon,
    MarkNode,
    DeleteNotice,
    Terminate,
    DeletePlacementGroup,
    DeleteNode,
    PatchFinalizer,
    ApplySecret,
    RecordSpend,
    RecordIndicators,
    Annotate,
    ApplyWorkloadJob,
    PatchWorkload,
    PinPod,
    Span,
}

impl ActionKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::CreatePod => "create_pod",
            ActionKind::DeletePod => "delete_pod",
            ActionKind::CreateRemotePod => "create_remote_pod",
            ActionKind::DeleteRemotePod => "delete_remote_pod",
            ActionKind::CreateRemoteCopy => "create_remote_copy",
            ActionKind::DeleteRemoteCopy => "delete_remote_copy",
            ActionKind::ApplyRemoteSecret => "apply_remote_secret",
            ActionKind::DeleteRemoteSecret => "delete_remote_secret",
            ActionKind::EvictPod => "evict_pod",
            ActionKind::ApplyStatus => "apply_status",
            ActionKind::Publish => "publish_event",
            ActionKind::Launch => "launch",
            ActionKind::Cordon => "cordon",
            ActionKind::MarkNode => "mark_node",
            ActionKind::DeleteNotice => "delete_notice",
            ActionKind::Terminate => "terminate",
            ActionKind::DeletePlacementGroup => "delete_placement_group",
            ActionKind::DeleteNode => "delete_node",
            ActionKind::PatchFinalizer => "patch_finalizer",
            ActionKind::ApplySecret => "apply_secret",
            ActionKind::RecordSpend => "record_spend",
            ActionKind::RecordIndicators => "record_indicators",
            ActionKind::Annotate => "annotate",
            ActionKind::ApplyWorkloadJob => "apply_workload_job",
            ActionKind::PatchWorkload => "patch_workload",
            ActionKind::PinPod => "pin_pod",
            ActionKind::Span => "span",
        }
    }
}
