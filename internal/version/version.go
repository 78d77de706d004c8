// Package version names the versions this build carries.
package version

// EngineVersion is the version of the session engine in this build: the
// Steps, their records and their rules. Workers report it, the operator plans
// rollouts by it, and the session Flow graph is published under it. Raise it
// with every change to the session Flow's behaviour or stored state.
const EngineVersion = "0.8.0"

// EngineVersions lists every engine version released so far, oldest first,
// the current one last. What each changed is told where it matters: the
// session Flow graph marks the Steps and transitions each version brought.
var EngineVersions = []string{"0.1.0", "0.2.0", "0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", EngineVersion}

// Operator is the operator's release, set at build time with
// -ldflags "-X github.com/stepwise-run/stepwise/internal/version.Operator=...".
var Operator = "dev"
