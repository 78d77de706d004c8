package v1alpha1

// Condition types. Each says what True means.
const (
	// ConditionReady is True when the controller applied everything the
	// resource asks for as of status.observedGeneration: for an Agent, its
	// worker configuration, ServiceAccount, Deployment and session Flow graph;
	// for a ToolSource or MediaStore, a spec whose Secrets exist and whose
	// fields are consistent; for a ClusterEngine, that the operator reached
	// the engine, learnt who it is and registered the search attributes
	// sessions need. It does not say that worker pods are running; see
	// ConditionWorkersAvailable.
	ConditionReady = "Ready"

	// ConditionWorkersAvailable is True when the Agent's worker Deployment has
	// at least its desired number of available replicas, or is scaled to zero.
	ConditionWorkersAvailable = "WorkersAvailable"
	// ConditionProgressing is True while the Agent's workers move to the
	// desired version, and False with reason RolloutComplete once they all
	// run it. Its reason says what the rollout waits for; an intended wait,
	// such as old workers stopping, is not an error.
	ConditionProgressing = "Progressing"
	// ConditionReconciling is True while a rollout is under way, with
	// Progressing's reason; with ConditionStalled it lets tools that read
	// the standard kstatus conditions, such as Argo CD and Flux, show the
	// rollout.
	ConditionReconciling = "Reconciling"
	// ConditionStalled is True when the Agent cannot be applied until
	// something changes, with Ready's reason.
	ConditionStalled = "Stalled"

	// ConditionInUse is True on a MediaStore while at least one Agent
	// references it. Deletion of a MediaStore waits until it is False, because
	// sessions still read the images it holds.
	ConditionInUse = "InUse"
)

// Reasons for ConditionReady.
const (
	// ReasonReconciled: everything the resource asks for is applied.
	ReasonReconciled = "Reconciled"
	// ReasonToolSourceNotFound: a ToolSource the Agent references does not exist.
	ReasonToolSourceNotFound = "ToolSourceNotFound"
	// ReasonToolSourceNotReady: a referenced ToolSource is not Ready.
	ReasonToolSourceNotReady = "ToolSourceNotReady"
	// ReasonToolSourceConflict: two ToolSources of the Agent have the same
	// source name, so their tools and stored calls could not be told apart,
	// or both offer the resource and prompt tools, whose names would clash.
	ReasonToolSourceConflict = "ToolSourceConflict"
	// ReasonMediaStoreNotFound: the referenced MediaStore does not exist.
	ReasonMediaStoreNotFound = "MediaStoreNotFound"
	// ReasonMediaStoreNotReady: the referenced MediaStore is not Ready, or is
	// being deleted.
	ReasonMediaStoreNotReady = "MediaStoreNotReady"
	// ReasonSecretNotFound: a referenced Secret does not exist.
	ReasonSecretNotFound = "SecretNotFound"
	// ReasonSecretKeyNotFound: a referenced Secret lacks the referenced key.
	ReasonSecretKeyNotFound = "SecretKeyNotFound"
	// ReasonSecretValueInvalid: a referenced Secret key holds a value its
	// use can never carry, such as a line break in an HTTP header value or a
	// NUL byte in an environment variable. The message names the field, the
	// Secret and the key, never the value.
	ReasonSecretValueInvalid = "SecretValueInvalid"
	// ReasonHostPathNotAllowed: a MediaStore's localDirectory has no
	// persistentVolumeClaimName and its root is not one of the host
	// directories the operator allows for hostPath volumes
	// (--media-host-path-roots), or lies under none of them. Agents that use
	// the store are not applied, so no worker pod mounts the node's directory.
	ReasonHostPathNotAllowed = "HostPathNotAllowed"
	// ReasonEngineNotConfigured: the Agent names no engine and the operator has
	// no default engine.
	ReasonEngineNotConfigured = "EngineNotConfigured"
	// ReasonEngineNotFound: the ClusterEngine the Agent names, or the
	// operator's default, does not exist.
	ReasonEngineNotFound = "EngineNotFound"
	// ReasonEngineNotReady: the ClusterEngine is not Ready: the operator has
	// not reached it, learnt who it is or registered its search attributes.
	ReasonEngineNotReady = "EngineNotReady"
	// ReasonEngineNotAllowed: the Agent may not use its engine: the
	// ClusterEngine does not select the Agent's namespace, or the Agent
	// names an engine of its own where the administrator allows none. The
	// Agent keeps no workers.
	ReasonEngineNotAllowed = "EngineNotAllowed"
	// ReasonEngineCredentialNotAllowed: a Secret the Agent's spec.engine
	// takes a credential from does not name the engine's address in its
	// agents.stepwise.run/engine-addresses annotation; the credential is
	// sent nowhere.
	ReasonEngineCredentialNotAllowed = "EngineCredentialNotAllowed"
	// ReasonEngineUnavailable: the operator could not ask the Agent's own
	// engine who it is, which claims need; it tries again.
	ReasonEngineUnavailable = "EngineUnavailable"
	// ReasonSearchAttributesNotRegistered: the ClusterEngine's namespace
	// lacks the search attributes sessions need and the operator may not
	// register them; the message says how an administrator does.
	ReasonSearchAttributesNotRegistered = "SearchAttributesNotRegistered"
	// ReasonAgentBudgetNeedsEngine: an agent budget on workers of engine
	// 0.7.0 and earlier, which keep one spend counter per Flow type for the
	// whole Temporal namespace that another namespace's Agent would share.
	ReasonAgentBudgetNeedsEngine = "AgentBudgetNeedsEngine"
	// ReasonFlowTypeConflict: another Agent already claims this Flow type on the
	// same engine namespace; the first claimant keeps its workers.
	ReasonFlowTypeConflict = "FlowTypeConflict"
	// ReasonInvalidSpec: the spec passed the API server's checks but cannot be
	// rendered, such as a worker configuration too large for a ConfigMap.
	ReasonInvalidSpec = "InvalidSpec"
	// ReasonUnknownEngineVersion: the workers' engine version is newer than
	// any this operator knows, so it cannot publish their Flow graph or
	// follow their rollout rules; upgrade the operator first.
	ReasonUnknownEngineVersion = "UnknownEngineVersion"
	// ReasonOwnedObjectConflict: an object the Agent would own, such as its
	// worker Deployment, exists and belongs to something else; the operator
	// never takes it over.
	ReasonOwnedObjectConflict = "OwnedObjectConflict"
	// ReasonReconcileFailed: reading or writing an object on the API server
	// failed; the controller retries.
	ReasonReconcileFailed = "ReconcileFailed"
)

// Reasons for ConditionWorkersAvailable.
const (
	// ReasonDeploymentAvailable: the desired number of workers is available.
	ReasonDeploymentAvailable = "DeploymentAvailable"
	// ReasonDeploymentUnavailable: fewer workers are available than desired.
	ReasonDeploymentUnavailable = "DeploymentUnavailable"
	// ReasonScaledToZero: the Agent asks for zero workers.
	ReasonScaledToZero = "ScaledToZero"
	// ReasonDeploymentNotCreated: no worker Deployment exists yet.
	ReasonDeploymentNotCreated = "DeploymentNotCreated"
	// ReasonRolloutStoppedWorkers: a stop-old-first rollout stopped the
	// workers; the new ones start once no old one exists or polls (see
	// ConditionProgressing).
	ReasonRolloutStoppedWorkers = "RolloutStoppedWorkers"
)

// Reasons for ConditionProgressing and ConditionReconciling.
const (
	// ReasonRolloutComplete: every desired worker is available and no other
	// version runs.
	ReasonRolloutComplete = "RolloutComplete"
	// ReasonRollingUpdate: new workers start beside older ones the worker
	// version rules let them run beside, or are not all available yet.
	ReasonRollingUpdate = "RollingUpdate"
	// ReasonWaitingForOldWorkersStopped: workers the new version may not run
	// beside are stopping, or polled the task queue too recently; the new
	// workers start once none exists or polls.
	ReasonWaitingForOldWorkersStopped = "WaitingForOldWorkersStopped"
)

// Reasons for ConditionStalled.
const (
	// ReasonNotStalled: nothing blocks the Agent.
	ReasonNotStalled = "NotStalled"
)

// Reasons for ConditionInUse.
const (
	// ReasonReferencedByAgents: at least one Agent references the MediaStore.
	ReasonReferencedByAgents = "ReferencedByAgents"
	// ReasonDeletionBlocked: the MediaStore is being deleted and waits for the
	// Agents that reference it to stop referencing it.
	ReasonDeletionBlocked = "DeletionBlocked"
	// ReasonNotReferenced: no Agent references the MediaStore.
	ReasonNotReferenced = "NotReferenced"
)

// MediaStoreProtectionFinalizer keeps a MediaStore until no Agent references
// it.
const MediaStoreProtectionFinalizer = "agents.stepwise.run/in-use-protection"
