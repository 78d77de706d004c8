package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	apischeme "github.com/stepwise-run/stepwise/api/scheme"
	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/rollout"
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
