// Package engineadmin is the operator's own client of the engine: what it
// reads and changes there for rollouts.
//
// The operator reaches the engine exactly as an Agent's workers do:
// ConnectionFor builds the address, namespace, TLS material and API key from
// the same Secret keys the rendered worker configuration points at, and the
// Client dials with the same SDK options. Errors name the field and the
// Secret, never a value.
//
// # What the engine says about pollers
//
// A rollout that stops old workers first waits until no worker polls the
// Agent's task queue. DescribeTaskQueue lists the identities that polled it
// recently, once per identity and task queue type however many poll
// goroutines a worker runs. Measured on Temporal server 1.29.1, and held by
// this package's tests on the server the tests run (1.32.0):
//
//   - LastAccess is set when a poll starts and again when it ends. An idle
//     worker's poll ends after the long-poll interval and is renewed at
//     once, so a live worker's LastAccess advances once per interval: every
//     60 seconds by default (seen at 0.1s, 60.1s, 120.1s after start). A
//     LastAccess up to one interval old is therefore no sign of a stopped
//     worker; one older than the interval with a margin is. LastAccess is
//     the engine's clock.
//   - A worker that stops ends its polls, and the engine records that end:
//     the last LastAccess is the moment of the stop (within a second),
//     then it no longer changes.
//   - A stopped worker stays listed for up to matching.PollerHistoryTTL
//     after its last access, five minutes by default: its workflow type
//     left the list 5m0s after the stop. The engine may forget it sooner:
//     its activity type left 4m30s after the stop, five minutes after its
//     last poll began. So an unlisted identity polls no more, a listed one
//     may have stopped minutes ago, and waiting for the list to empty costs
//     up to five minutes where comparing LastAccess with the long-poll
//     interval does not.
//   - Right after a worker starts, a task queue type may be unlisted for
//     up to a second.
//   - An unversioned worker reports no deployment options: DeploymentName
//     and BuildID are empty.
//
// The dev server accepts both settings as dynamic configuration, so tests
// need not wait minutes: --dynamic-config-value
// matching.longPollExpirationInterval="10s" makes a live worker's LastAccess
// advance every 10 seconds, and matching.PollerHistoryTTL="20s" drops a
// stopped worker 20 seconds after its stop.
package engineadmin
