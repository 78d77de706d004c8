package rollout

import (
	"strconv"
	"strings"
	"time"
)

// DefaultPollerQuietPeriod is how long a worker must not have polled to
// count as stopped. It exceeds the engine's one-minute long poll, so a
// worker in the middle of a poll always counts as polling.
const DefaultPollerQuietPeriod = 75 * time.Second

// identityEngineMark starts the part of a worker identity that names its
// engine version.
const identityEngineMark = "engine-"

// WorkerIdentity is the identity a worker gives the engine: the SDK's
// process and host, and the engine version it runs, so that anyone who
// lists a task queue's pollers learns which versions serve its sessions.
func WorkerIdentity(pid int, host, engineVersion string) string {
	return strconv.Itoa(pid) + "@" + host + "@" + identityEngineMark + engineVersion
}

// EngineVersionOfIdentity reads the engine version a worker identity names;
// identities of other workers name none.
func EngineVersionOfIdentity(identity string) (string, bool) {
	i := strings.LastIndex(identity, "@"+identityEngineMark)
	if i < 0 {
		return "", false
	}
	v := identity[i+1+len(identityEngineMark):]
	return v, v != "" && !strings.Contains(v, "@")
}
