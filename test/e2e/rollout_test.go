package e2e

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	temporalclient "go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/devserver"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
	"github.com/stepwise-run/stepwise/internal/tenancy"
	"github.com/stepwise-run/stepwise/internal/version"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// stopOldFirstUnderLoad rolls the exporter Agent back to the latest engine
// version the current one may not run beside, and then forward again, each time while sessions
// run a non-idempotent tool call. The rules let neither version run beside
// the other, so the operator must stop every old worker first. A pod watch
// from a fixed resourceVersion and the task queue's pollers show that no
// old and new worker ever existed or polled together; every session ends
// its turn, and no tool call runs twice.
func stopOldFirstUnderLoad(t *testing.T) {
	const agentName = "exporter"
	current := version.EngineVersion
	previous := ""
	for _, v := range version.EngineVersions {
		// A version whose sessions move between turns may hand them to a
		// newer one as Worker Deployment versions instead (see
		// upgradeAcrossEngineVersions): this step wants one that stops
		// first both ways.
		if !rollout.RunBeside(v, current) && !rollout.MovesBetweenTurnsIn(v) {
			previous = v
		}
	}
	agent := waitAgent(t, agentName, func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 })
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	watcher := watchWorkers(t, agentName, agent.Status.TaskQueue)

	ids := []string{"load-1", "load-2", "load-3"}
	for round, target := range []string{previous, current} {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		for _, id := range ids {
			ok, err := startOrSend(ctx, s, id, `call slow_export {"seconds":8}`, round == 0)
			if err != nil || !ok {
				t.Fatalf("session %s: %v %v", id, ok, err)
			}
		}
		waitFor(t, "every session's slow_export to run on a worker", func() (bool, error) {
			for _, id := range ids {
				desc, err := describeSession(ctx, s, id)
				if err != nil {
					return false, nil
				}
				started := false
				for _, a := range desc.RawResponse.GetPendingActivities() {
					started = started || a.State == enumspb.PENDING_ACTIVITY_STATE_STARTED
				}
				if !started {
					return false, nil
				}
			}
			return true, nil
		})
		t.Logf("rolling %s to engine %s while three slow_export calls run", agentName, target)
		kubectl(t, "patch", "agent", agentName, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"workers":{"engineVersion":%q}}}`, target))
		waitAgent(t, agentName, func(a *agentsv1.Agent) bool {
			v := a.Status.WorkerVersions
			return len(v) == 1 && v[0].EngineVersion == target && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 2 &&
				meta.IsStatusConditionFalse(a.Status.Conditions, agentsv1.ConditionProgressing) && a.Status.RolloutStrategy == "StopOldFirst"
		})
		for _, id := range ids {
			var snap sessions.Snapshot
			waitFor(t, "session "+id+" to end its turn", func() (bool, error) {
				var err error
				snap, err = s.Snapshot(ctx, id)
				return err == nil && snap.State != nil && snap.State.ActiveTurnID == "" && snap.State.TurnCount == round+1, nil
			})
			if n := countToolMessages(snap, "slow_export"); n != round+1 {
				t.Fatalf("session %s ran slow_export %d times in %d turns; a non-idempotent write runs once per call", id, n, round+1)
			}
			if last := lastToolMessage(snap, "slow_export"); !strings.Contains(last.Text, "exported by "+agentName+"-") {
				t.Fatalf("session %s: the export of turn %d says %q", id, round+1, last.Text)
			}
			if final := snap.Messages[len(snap.Messages)-1]; final.Role != "assistant" {
				t.Fatalf("session %s ends its turn with a %s message, want the assistant's answer", id, final.Role)
			}
		}
		cancel()
	}
	watcher.stop()
	watcher.check(t, []string{previous, current})
}

// upgradeAcrossEngineVersions runs a new Agent on the worker image of the
// previous engine version, built from that version's last commit, and
// upgrades it to this build's image and engine version, which the previous
// one may not run beside, while sessions send turns. The two versions run at
// once as Worker Deployment versions: every session keeps answering, each
// moves to the new version at its next turn (its run there records this
// build's workflow code revision, its run before the previous one's), and
// the old version drains, its Deployment and its engine-side record
// removed. No tool call runs twice.
func upgradeAcrossEngineVersions(t *testing.T) {
	const agentName = "archiver"
	current, previous := version.EngineVersion, cfg.previousEngineVersion
	if rollout.RunBeside(previous, current) {
		t.Fatalf("engine %s runs beside %s; the upgrade must cross versions that may not", previous, current)
	}
	manifest := func(image, engineVersion string) string {
		return fmt.Sprintf(`apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata:
  name: %s
  namespace: default
spec:
  flowType: ArchiverAgent
  instructions: You archive records.
  model: {provider: scripted, name: demo}
  toolPolicies:
    - {name: slow_export, effect: non_idempotent_write, requiresApproval: false}
  workers:
    image: %s
    engineVersion: %s
    replicas: 2
`, agentName, image, engineVersion)
	}
	settledOn := func(engineVersion string) func(*agentsv1.Agent) bool {
		return func(a *agentsv1.Agent) bool {
			v := a.Status.WorkerVersions
			return len(v) == 1 && v[0].EngineVersion == engineVersion && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 2 &&
				meta.IsStatusConditionFalse(a.Status.Conditions, agentsv1.ConditionProgressing)
		}
	}
	apply(t, manifest(previousImage("e2e-worker"), previous))
	t.Cleanup(func() { kubectl(t, "delete", "agent", agentName, "--wait=false") })
	agent := waitAgent(t, agentName, settledOn(previous))
	before := agent.Status.WorkerVersions[0]
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()

	ids := []string{"archive-1", "archive-2", "archive-3"}
	load := startTurnLoad(ctx, t, s, ids, 3)
	load.waitTurns(t, 1) // every session has run a turn on the previous engine
	firstRuns := map[string]string{}
	for _, id := range ids {
		desc, err := describeSession(ctx, s, id)
		if err != nil {
			t.Fatal(err)
		}
		firstRuns[id] = desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId()
		if got := sessionBuildID(ctx, s, id); got != before.BuildID {
			t.Fatalf("session %s runs on %q, want the previous engine's %s", id, got, before.BuildID)
		}
	}
	reasons := sampleReasons(ctx, agentName)
	want := rollout.Worker{EngineVersion: current, Image: image("e2e-worker")}.BuildID()
	t.Logf("upgrading %s from engine %s (%s) to %s (%s) while sessions send turns", agentName, previous, before.BuildID, current, want)
	apply(t, manifest(image("e2e-worker"), current))
	waitFor(t, "both engine versions to run at once", func() (bool, error) {
		pods, err := listWorkerPods(agentName)
		seen := map[string]bool{}
		for i := range pods {
			if podReady(&pods[i]) {
				seen[pods[i].Labels[render.LabelEngineVersion]] = true
			}
		}
		return seen[previous] && seen[current], err
	})
	after := waitAgent(t, agentName, func(a *agentsv1.Agent) bool {
		return settledOn(current)(a) && a.Status.WorkerVersions[0].BuildID == want && a.Status.RolloutStrategy == string(rollout.StrategyVersioned)
	})
	load.waitTurns(t, 1) // and a turn since on the new one
	for _, id := range ids {
		waitFor(t, "session "+id+" to run on "+want, func() (bool, error) { return runsOn(ctx, s, id, want) })
	}
	deploymentName := tenancy.Tenant(agent.Namespace, agent.Spec.FlowType).WorkerDeployment()
	if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: render.VersionedWorkerName(agentName, before.BuildID)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Fatalf("the drained version's Deployment is still there (%v)", err)
	}
	waitFor(t, "the engine to forget version "+before.BuildID, func() (bool, error) {
		return !slices.Contains(versionsOf(t, deploymentName), before.BuildID), nil
	})
	load.stop(t)
	if got := reasons(); !slices.Contains(got, string(rollout.PhaseDraining)) {
		t.Errorf("the Agent's Progressing reasons were %v; want %s while the old version drained", got, rollout.PhaseDraining)
	}
	// The runs themselves show which engine ran them: the workflow code
	// revision each recorded when it began.
	for _, id := range ids {
		old, err := engineRevision(ctx, s, id, firstRuns[id])
		if err != nil {
			t.Fatal(err)
		}
		now, err := engineRevision(ctx, s, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if now <= old {
			t.Errorf("session %s: its run on engine %s records revision %d, its first run on %s revision %d; want a newer one", id, current, now, previous, old)
		}
	}
	t.Logf("%s is current on engine %s with %d workers; %s drained and removed", want, current, after.Status.ReadyReplicas, before.BuildID)
}

// engineRevision is the workflow code revision a session's run recorded in
// its version marker when it began.
func engineRevision(ctx context.Context, s *sessions.Sessions, id, runID string) (int, error) {
	found, err := s.Describe(ctx, id)
	if err != nil {
		return 0, err
	}
	it := engine.Client().GetWorkflowHistory(ctx, found.WorkflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		event, err := it.Next()
		if err != nil {
			return 0, err
		}
		marker := event.GetMarkerRecordedEventAttributes()
		if marker == nil || marker.GetMarkerName() != "Version" {
			continue
		}
		var changeID string
		var revision int
		if err := converter.GetDefaultDataConverter().FromPayloads(marker.GetDetails()["change-id"], &changeID); err != nil {
			return 0, err
		}
		if changeID != engineRevisionChangeID {
			continue
		}
		if err := converter.GetDefaultDataConverter().FromPayloads(marker.GetDetails()["version"], &revision); err != nil {
			return 0, err
		}
		return revision, nil
	}
	return 0, fmt.Errorf("session %s run %q records no %s version marker", id, runID, engineRevisionChangeID)
}

// engineRevisionChangeID is the change ID under which the session workflow
// records its code revision.
const engineRevisionChangeID = "stepwise-engine"

// startOrSend starts the session with its first message, or sends it the
// next one.
func startOrSend(ctx context.Context, s *sessions.Sessions, id, text string, first bool) (bool, error) {
	if first {
		return s.Start(ctx, id, text)
	}
	return s.Send(ctx, id, text)
}

// workerWatch records, from a pod watch that starts at a fixed
// resourceVersion and from the engine's task queue pollers, which worker
// versions existed and polled, and when.
type workerWatch struct {
	agent, taskQueue string
	cancel           context.CancelFunc
	done             sync.WaitGroup

	mu sync.Mutex
	// versionOf is the engine version of every pod the watch saw.
	versionOf map[string]string
	// together lists moments when pods of two versions existed at once.
	together []string
	// firstPoll and lastPoll bound each poller identity's polls.
	firstPoll, lastPoll map[string]time.Time
	// reasons are the Progressing reasons the Agent reported, in order.
	reasons []string
	// gaps are the times between the last old pod going and the first new
	// pod appearing: how long sessions waited for a worker.
	lastGone time.Time
	gaps     []time.Duration
}

func watchWorkers(t *testing.T, agent, taskQueue string) *workerWatch {
	t.Helper()
	rest, err := cluster.RESTConfig()
	if err != nil {
		t.Fatal(err)
	}
	scheme, err := apischeme.New()
	if err != nil {
		t.Fatal(err)
	}
	watcher, err := client.NewWithWatch(rest, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	var list corev1.PodList
	selector := client.MatchingLabels(render.SelectorLabels(agent))
	if err := watcher.List(context.Background(), &list, client.InNamespace("default"), selector); err != nil {
		t.Fatal(err)
	}
	w := &workerWatch{agent: agent, taskQueue: taskQueue, versionOf: map[string]string{},
		firstPoll: map[string]time.Time{}, lastPoll: map[string]time.Time{}}
	present := map[string]string{}
	for _, p := range list.Items {
		present[p.Name] = p.Labels[render.LabelEngineVersion]
		w.versionOf[p.Name] = present[p.Name]
	}
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done.Add(3)
	go func() {
		defer w.done.Done()
		w.watchPods(ctx, watcher, list.ResourceVersion, present, selector)
	}()
	go func() {
		defer w.done.Done()
		w.samplePollers(ctx)
	}()
	go func() {
		defer w.done.Done()
		w.sampleAgent(ctx)
	}()
	return w
}

// watchPods follows every change to the Agent's pods from resourceVersion
// on, so no pod that lived between two samples is missed.
func (w *workerWatch) watchPods(ctx context.Context, c client.WithWatch, resourceVersion string, present map[string]string, selector client.MatchingLabels) {
	for ctx.Err() == nil {
		events, err := c.Watch(ctx, &corev1.PodList{}, client.InNamespace("default"), selector,
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: resourceVersion, AllowWatchBookmarks: true}})
		if err != nil {
			w.record(fmt.Sprintf("the pod watch from resourceVersion %s failed: %v", resourceVersion, err))
			return
		}
		for e := range events.ResultChan() {
			pod, ok := e.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			resourceVersion = pod.ResourceVersion
			if e.Type == watch.Bookmark {
				continue
			}
			w.mu.Lock()
			switch e.Type {
			case watch.Added, watch.Modified:
				if _, known := present[pod.Name]; !known && len(present) == 0 && !w.lastGone.IsZero() {
					w.gaps = append(w.gaps, time.Since(w.lastGone))
				}
				present[pod.Name] = pod.Labels[render.LabelEngineVersion]
				w.versionOf[pod.Name] = present[pod.Name]
			case watch.Deleted:
				delete(present, pod.Name)
				if len(present) == 0 {
					w.lastGone = time.Now()
				}
			}
			versions := map[string][]string{}
			for name, v := range present {
				versions[v] = append(versions[v], name)
			}
			if len(versions) > 1 {
				w.together = append(w.together, fmt.Sprintf("after %s of %s (resourceVersion %s): %v", e.Type, pod.Name, pod.ResourceVersion, versions))
			}
			w.mu.Unlock()
		}
		events.Stop()
	}
}

// samplePollers reads the task queue's pollers twice a second.
func (w *workerWatch) samplePollers(ctx context.Context) {
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, kind := range []enumspb.TaskQueueType{enumspb.TASK_QUEUE_TYPE_WORKFLOW, enumspb.TASK_QUEUE_TYPE_ACTIVITY} {
			resp, err := engine.Client().DescribeTaskQueue(ctx, w.taskQueue, kind)
			if err != nil {
				continue
			}
			w.mu.Lock()
			for _, p := range resp.GetPollers() {
				at := p.GetLastAccessTime().AsTime()
				if first, ok := w.firstPoll[p.GetIdentity()]; !ok || at.Before(first) {
					w.firstPoll[p.GetIdentity()] = at
				}
				if at.After(w.lastPoll[p.GetIdentity()]) {
					w.lastPoll[p.GetIdentity()] = at
				}
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// sampleAgent records the Progressing reasons the Agent goes through.
func (w *workerWatch) sampleAgent(ctx context.Context) {
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	for {
		var a agentsv1.Agent
		if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: w.agent}, &a); err == nil {
			if c := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionProgressing); c != nil {
				w.mu.Lock()
				if len(w.reasons) == 0 || w.reasons[len(w.reasons)-1] != c.Reason {
					w.reasons = append(w.reasons, c.Reason)
				}
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (w *workerWatch) record(problem string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.together = append(w.together, problem)
}

func (w *workerWatch) stop() {
	w.cancel()
	w.done.Wait()
}

// check fails the test if pods or pollers of two versions overlapped, and
// reports how long sessions waited for a worker.
func (w *workerWatch) check(t *testing.T, targets []string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.together) > 0 {
		t.Errorf("old and new workers existed together:\n%s", strings.Join(w.together, "\n"))
	}
	// Each poller identity names its pod; pods of other versions must not
	// have polled while it did.
	type span struct {
		identity, version string
		from, to          time.Time
	}
	var spans []span
	for identity, from := range w.firstPoll {
		parts := strings.Split(identity, "@")
		if len(parts) < 2 {
			continue
		}
		v, ok := w.versionOf[parts[1]]
		if !ok {
			continue // a pod gone before the watch began
		}
		spans = append(spans, span{identity, v, from, w.lastPoll[identity]})
	}
	versions := map[string]bool{}
	for i, a := range spans {
		versions[a.version] = true
		for _, b := range spans[i+1:] {
			if a.version != b.version && !a.to.Before(b.from) && !b.to.Before(a.from) {
				t.Errorf("workers of engine %s (%s, polled %s to %s) and %s (%s, polled %s to %s) polled together",
					a.version, a.identity, a.from.Format(time.StampMilli), a.to.Format(time.StampMilli),
					b.version, b.identity, b.from.Format(time.StampMilli), b.to.Format(time.StampMilli))
			}
		}
	}
	for _, v := range targets {
		if !versions[v] {
			t.Errorf("no worker of engine %s was seen polling; the poller check saw nothing to compare", v)
		}
	}
	if !slices.Contains(w.reasons, agentsv1.ReasonWaitingForOldWorkersStopped) {
		t.Errorf("the Agent's Progressing reasons were %v; want %s while old workers stopped", w.reasons, agentsv1.ReasonWaitingForOldWorkersStopped)
	}
	t.Logf("pod watch and %d poller identities: no overlap; Progressing went %v; sessions waited for a worker %v in the stop-old-first gaps",
		len(spans), w.reasons, w.gaps)
}

// versionedUpgradeUnderLoad rolls the exporter Agent to a new image of its
// engine version, and back (a revert of the image), while sessions keep
// sending turns that each run a non-idempotent tool call. Each image is a
// version of the Agent's Worker Deployment: the new one starts beside the
// old, new sessions start on it once it is current, and every session
// pinned to the old one moves at its next turn boundary, idle or not. The
// old version's workers stop once the engine reports it drained, and its
// Deployment and engine record go. Sessions never wait for the rollout:
// the test reports the longest a turn took beyond its tool call.
func versionedUpgradeUnderLoad(t *testing.T) {
	const agentName = "exporter"
	settled := func(a *agentsv1.Agent) bool {
		v := a.Status.WorkerVersions
		return len(v) == 1 && v[0].State == agentsv1.WorkerVersionCurrent && v[0].ReadyReplicas == 2 &&
			meta.IsStatusConditionFalse(a.Status.Conditions, agentsv1.ConditionProgressing)
	}
	agent := waitAgent(t, agentName, settled)
	first := agent.Status.WorkerVersions[0]
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	deploymentName := tenancy.Tenant(agent.Namespace, agent.Spec.FlowType).WorkerDeployment()
	// The same worker under a second tag is a new image to the operator: a
	// new build ID, so a new version.
	fixed := image("e2e-worker") + "-fix"
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "ctr", "--address", cluster.ContainerdAddress(), "--namespace", "k8s.io",
		"images", "tag", "--force", image("e2e-worker"), fixed).CombinedOutput(); err != nil {
		t.Fatalf("tagging the worker image as %s: %v\n%s", fixed, err, out)
	}
	if cur := currentVersionOf(t, deploymentName); cur != first.BuildID {
		t.Fatalf("the engine's current version of %s is %q; want the exporter's %s", deploymentName, cur, first.BuildID)
	}

	// The idle sessions of the stop-old-first step are pinned to the first
	// version; they must move without a new turn.
	idle := []string{"load-1", "load-2", "load-3"}
	load := startTurnLoad(ctx, t, s, []string{"steady-1", "steady-2", "steady-3"}, 3)
	for round, target := range []string{fixed, first.Image} {
		before := waitAgent(t, agentName, settled).Status.WorkerVersions[0]
		want := rollout.Worker{EngineVersion: before.EngineVersion, Image: target}.BuildID()
		load.waitTurns(t, 1) // every session has a turn running or done on the old version
		reasons := sampleReasons(ctx, agentName)
		t.Logf("rolling %s from %s (%s) to %s (%s) while sessions send turns", agentName, before.Image, before.BuildID, target, want)
		kubectl(t, "patch", "agent", agentName, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"workers":{"image":%q}}}`, target))
		waitFor(t, "both versions to run at once", func() (bool, error) {
			pods, err := listWorkerPods(agentName)
			seen := map[string]bool{}
			for i := range pods {
				if podReady(&pods[i]) {
					seen[pods[i].Labels[render.LabelBuildID]] = true
				}
			}
			return seen[before.BuildID] && seen[want], err
		})
		after := waitAgent(t, agentName, func(a *agentsv1.Agent) bool {
			return settled(a) && a.Status.WorkerVersions[0].BuildID == want && a.Status.RolloutStrategy == string(rollout.StrategyVersioned)
		})
		load.waitTurns(t, 1) // and a turn since on the new one
		for _, id := range append(slices.Clone(idle), load.ids...) {
			waitFor(t, "session "+id+" to run on "+want, func() (bool, error) { return runsOn(ctx, s, id, want) })
		}
		if err := kube.Get(ctx, client.ObjectKey{Namespace: "default", Name: render.VersionedWorkerName(agentName, before.BuildID)}, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
			t.Fatalf("the drained version's Deployment is still there (%v)", err)
		}
		waitFor(t, "the engine to forget version "+before.BuildID, func() (bool, error) {
			return !slices.Contains(versionsOf(t, deploymentName), before.BuildID), nil
		})
		if cur := currentVersionOf(t, deploymentName); cur != want {
			t.Fatalf("the engine's current version is %q after the rollout; want %s", cur, want)
		}
		got := reasons()
		if !slices.Contains(got, string(rollout.PhaseDraining)) {
			t.Errorf("round %d: the Agent's Progressing reasons were %v; want %s while the old version drained", round+1, got, rollout.PhaseDraining)
		}
		t.Logf("round %d: %s is current, %s drained and removed; Progressing went %v; %d workers ready", round+1, want, before.BuildID, got, after.Status.ReadyReplicas)
	}
	load.stop(t)
}

// turnLoad keeps sessions busy: each sends a turn that runs slow_export as
// soon as its last turn ended, and records how long every turn took beyond
// the export itself.
type turnLoad struct {
	ids     []string
	seconds int
	stopped chan struct{}
	done    sync.WaitGroup

	mu      sync.Mutex
	turns   map[string]int
	longest time.Duration
	errs    []string
}

func startTurnLoad(ctx context.Context, t *testing.T, s *sessions.Sessions, ids []string, seconds int) *turnLoad {
	t.Helper()
	l := &turnLoad{ids: ids, seconds: seconds, stopped: make(chan struct{}), turns: map[string]int{}}
	for _, id := range ids {
		l.done.Add(1)
		go func() {
			defer l.done.Done()
			l.run(ctx, s, id)
		}()
	}
	return l
}

func (l *turnLoad) run(ctx context.Context, s *sessions.Sessions, id string) {
	text := fmt.Sprintf(`call slow_export {"seconds":%d}`, l.seconds)
	for turn := 1; ; turn++ {
		select {
		case <-l.stopped:
			return
		default:
		}
		began := time.Now()
		ok, err := startOrSend(ctx, s, id, text, turn == 1)
		if err != nil || !ok {
			l.fail(fmt.Sprintf("session %s turn %d: sent %v, %v", id, turn, ok, err))
			return
		}
		for {
			snap, err := s.Snapshot(ctx, id)
			if ctx.Err() != nil {
				l.fail(fmt.Sprintf("session %s turn %d did not end: %v", id, turn, err))
				return
			}
			if err == nil && snap.State != nil && snap.State.TurnCount == turn && snap.State.ActiveTurnID == "" {
				// A snapshot shows the newest 200 messages only: a long
				// load outgrows it, so the count reads every stored page.
				n, err := countStoredToolMessages(ctx, s, id, "slow_export")
				if err != nil || n != turn {
					l.fail(fmt.Sprintf("session %s ran slow_export %d times in %d turns (%v); a non-idempotent write runs once per call", id, n, turn, err))
					return
				}
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		l.mu.Lock()
		l.turns[id] = turn
		l.longest = max(l.longest, time.Since(began)-time.Duration(l.seconds)*time.Second)
		l.mu.Unlock()
	}
}

func (l *turnLoad) fail(problem string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errs = append(l.errs, problem)
}

// waitTurns waits until every session ended n more turns than now.
func (l *turnLoad) waitTurns(t *testing.T, n int) {
	t.Helper()
	l.mu.Lock()
	from := maps.Clone(l.turns)
	l.mu.Unlock()
	waitFor(t, fmt.Sprintf("every loaded session to end %d more turns", n), func() (bool, error) {
		l.mu.Lock()
		defer l.mu.Unlock()
		if len(l.errs) > 0 {
			return false, errors.New(strings.Join(l.errs, "; "))
		}
		for _, id := range l.ids {
			if l.turns[id] < from[id]+n {
				return false, nil
			}
		}
		return true, nil
	})
}

// stop lets every session end its turn, and fails the test on a session
// that did not answer or ran a tool call twice.
func (l *turnLoad) stop(t *testing.T) {
	t.Helper()
	close(l.stopped)
	l.done.Wait()
	if len(l.errs) > 0 {
		t.Fatal(strings.Join(l.errs, "\n"))
	}
	t.Logf("sessions %v ended %v turns; the longest turn took %s beyond its %ds tool call",
		l.ids, l.turns, l.longest.Round(10*time.Millisecond), l.seconds)
}

// sampleReasons records the Agent's Progressing reasons until the returned
// function is called, which returns them in order.
func sampleReasons(ctx context.Context, agent string) func() []string {
	ctx, cancel := context.WithCancel(ctx)
	w := &workerWatch{agent: agent}
	w.done.Add(1)
	go func() {
		defer w.done.Done()
		w.sampleAgent(ctx)
	}()
	return func() []string {
		cancel()
		w.done.Wait()
		return w.reasons
	}
}

// sessionBuildID is the build ID of the Worker Deployment version the
// session's current run is pinned to, or "" when it is not pinned.
func sessionBuildID(ctx context.Context, s *sessions.Sessions, id string) string {
	desc, err := describeSession(ctx, s, id)
	if err != nil {
		return ""
	}
	return desc.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo().GetDeploymentVersion().GetBuildId()
}

// runsOn says whether a session runs on a version, and otherwise, what the
// engine says of its versioning.
func runsOn(ctx context.Context, s *sessions.Sessions, id, buildID string) (bool, error) {
	desc, err := describeSession(ctx, s, id)
	if err != nil {
		return false, err
	}
	info := desc.RawResponse.GetWorkflowExecutionInfo().GetVersioningInfo()
	if info.GetDeploymentVersion().GetBuildId() == buildID {
		return true, nil
	}
	return false, fmt.Errorf("session %s (run %s) has versioning %v", id, desc.RawResponse.GetWorkflowExecutionInfo().GetExecution().GetRunId(), info)
}

func describeWorkerDeployment(t *testing.T, name string) *workflowservice.DescribeWorkerDeploymentResponse {
	t.Helper()
	var resp *workflowservice.DescribeWorkerDeploymentResponse
	// The engine limits the requests each Worker Deployment takes, which
	// the operator shares: a refused one is asked again.
	waitFor(t, "the engine to describe Worker Deployment "+name, func() (bool, error) {
		var err error
		resp, err = engine.Client().WorkflowService().DescribeWorkerDeployment(context.Background(),
			&workflowservice.DescribeWorkerDeploymentRequest{Namespace: devserver.Namespace, DeploymentName: name})
		var exhausted *serviceerror.ResourceExhausted
		if errors.As(err, &exhausted) {
			return false, nil
		}
		return err == nil, err
	})
	return resp
}

func currentVersionOf(t *testing.T, name string) string {
	t.Helper()
	return describeWorkerDeployment(t, name).GetWorkerDeploymentInfo().GetRoutingConfig().GetCurrentDeploymentVersion().GetBuildId()
}

func versionsOf(t *testing.T, name string) []string {
	t.Helper()
	var out []string
	for _, v := range describeWorkerDeployment(t, name).GetWorkerDeploymentInfo().GetVersionSummaries() {
		out = append(out, v.GetDeploymentVersion().GetBuildId())
	}
	return out
}

// featureGateOnTheCluster starts a pod that polls the exporter's task queue
// as a worker of engine 0.1.0, which has no steering, beside the Agent's
// 0.5.0 workers. While it polls, the client refuses to steer a session and
// names that pod and its version; once the pod is gone and the engine has
// forgotten its poller, the same request goes through to the session.
func featureGateOnTheCluster(t *testing.T) {
	const agentName = "exporter"
	agent := waitAgent(t, agentName, func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 2 })
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	ctx, cancel := context.WithTimeout(context.Background(), 2*wait)
	defer cancel()
	const session = "steady-1" // idle since the versioned rollout
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "old-engine-poller"},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "poller", Image: image("e2e-worker"), ImagePullPolicy: corev1.PullNever,
				Env: []corev1.EnvVar{
					{Name: "E2E_OLD_ENGINE_VERSION", Value: "0.1.0"},
					{Name: "E2E_TEMPORAL_ADDRESS", Value: engineForPods},
					{Name: "E2E_TEMPORAL_NAMESPACE", Value: devserver.Namespace},
					{Name: "E2E_TASK_QUEUE", Value: agent.Status.TaskQueue},
				},
			}},
		},
	}
	if err := kube.Create(ctx, pod); err != nil {
		t.Fatal(err)
	}
	var refusal *sessions.FeatureError
	waitFor(t, "steering to be refused while the 0.1.0 pod polls", func() (bool, error) {
		ok, err := s.Steer(ctx, session, "change course")
		if ok {
			return false, errors.New("a steer was sent while a worker without steering polls")
		}
		return errors.As(err, &refusal), nil
	})
	if refusal.EngineVersion != "0.1.0" || !strings.Contains(refusal.Worker, pod.Name) || refusal.Since != "0.2.0" {
		t.Fatalf("the refusal is %+v; want it to name the pod, engine 0.1.0 and 0.2.0", refusal)
	}
	t.Logf("refused: %v", refusal)
	if err := kube.Delete(ctx, pod); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "steering to reach the session once the 0.1.0 pod has stopped polling", func() (bool, error) {
		sent, err := s.Steer(ctx, session, "change course")
		if errors.As(err, &refusal) {
			return false, nil
		}
		// The session is idle, so it may turn the steer down (false); what
		// matters is that the session, not the gate, answered.
		t.Logf("the session answered the steer: %v", sent)
		return true, err
	})
}

// describeSession describes one of the Agent's sessions on the engine.
func describeSession(ctx context.Context, s *sessions.Sessions, id string) (*temporalclient.WorkflowExecutionDescription, error) {
	found, err := s.Describe(ctx, id)
	if err != nil {
		return nil, err
	}
	return engine.Client().DescribeWorkflow(ctx, found.WorkflowID, "")
}
