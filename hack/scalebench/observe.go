package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
)

// readiness follows the Agents through an informer of the benchmark's own
// and notes when each first is Ready for its current generation, as the
// operator reports it: Ready True, the condition and status.observedGeneration
// both current. There are no kubelets, so no worker pod ever runs and
// WorkersAvailable stays False; Ready means the worker objects are applied.
type readiness struct {
	mu        sync.Mutex
	want      int
	createdAt map[string]time.Time
	readyAt   map[string]time.Time
	all       chan struct{}
	allAt     time.Time
	cancel    context.CancelFunc
}

func watchReadiness(ctx context.Context, cfg *rest.Config, scheme *k8sruntime.Scheme, want int) (*readiness, error) {
	ctx, cancel := context.WithCancel(ctx)
	r := &readiness{want: want, createdAt: map[string]time.Time{}, readyAt: map[string]time.Time{}, all: make(chan struct{}), cancel: cancel}
	agents, err := cache.New(cfg, cache.Options{Scheme: scheme, DefaultNamespaces: map[string]cache.Config{benchNamespace: {}}})
	if err != nil {
		cancel()
		return nil, err
	}
	informer, err := agents.GetInformer(ctx, &agentsv1.Agent{})
	if err != nil {
		cancel()
		return nil, err
	}
	if _, err := informer.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    r.observe,
		UpdateFunc: func(_, obj any) { r.observe(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}
	go func() { _ = agents.Start(ctx) }()
	if !agents.WaitForCacheSync(ctx) {
		cancel()
		return nil, errors.New("the benchmark's Agent informer did not sync")
	}
	return r, nil
}

// isReady is whether the operator reports an Agent Ready for its current
// generation.
func isReady(a *agentsv1.Agent) bool {
	c := meta.FindStatusCondition(a.Status.Conditions, agentsv1.ConditionReady)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == a.Generation &&
		a.Status.ObservedGeneration == a.Generation
}

func (r *readiness) observe(obj any) {
	agent, ok := obj.(*agentsv1.Agent)
	if !ok || !isReady(agent) {
		return
	}
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.readyAt[agent.Name]; seen {
		return
	}
	r.readyAt[agent.Name] = now
	if len(r.readyAt) == r.want {
		r.allAt = now
		close(r.all)
	}
}

// created notes when the benchmark sends an Agent's create request.
func (r *readiness) created(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.createdAt[name] = time.Now()
}

// wait returns when every Agent was first seen Ready.
func (r *readiness) wait(timeout time.Duration) (time.Time, error) {
	select {
	case <-r.all:
		return r.allAt, nil
	case <-time.After(timeout):
		r.mu.Lock()
		defer r.mu.Unlock()
		return time.Time{}, fmt.Errorf("after %s only %d of %d Agents are Ready", timeout, len(r.readyAt), r.want)
	}
}

// latencies are the times from each Agent's create request to its first
// Ready, sorted.
func (r *readiness) latencies() []time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]time.Duration, 0, len(r.readyAt))
	for name, ready := range r.readyAt {
		out = append(out, ready.Sub(r.createdAt[name]))
	}
	slices.Sort(out)
	return out
}

func (r *readiness) stop() { r.cancel() }

// controllers are the operator's controllers, by the name their metrics
// carry.
var controllers = []string{"agent", "toolsource", "mediastore"}

// reconcileCounts reads, from the operator's in-process metrics, how many
// reconciles each controller has finished.
func reconcileCounts() map[string]float64 {
	counts := map[string]float64{}
	for _, sample := range gather("controller_runtime_reconcile_total") {
		counts[sample.labels["controller"]] += sample.value
	}
	return counts
}

// busy is whether any controller has work queued or in progress.
func busy() bool {
	var n float64
	for _, sample := range gather("workqueue_depth") {
		n += sample.value
	}
	for _, sample := range gather("controller_runtime_active_workers") {
		n += sample.value
	}
	return n > 0
}

type sample struct {
	labels map[string]string
	value  float64
}

// gather reads one metric family of the operator's registry.
func gather(name string) []sample {
	families, err := metrics.Registry.Gather()
	if err != nil {
		return nil
	}
	var out []sample
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			s := sample{labels: map[string]string{}, value: m.GetCounter().GetValue() + m.GetGauge().GetValue()}
			for _, l := range m.GetLabel() {
				s.labels[l.GetName()] = l.GetValue()
			}
			out = append(out, s)
		}
	}
	return out
}

// settle waits until the operator has had nothing queued or running and
// finished no reconcile for opts.quiet, and done (when given) holds.
func settle(ctx context.Context, opts options, done func(map[string]float64) bool) error {
	deadline := time.Now().Add(opts.timeout)
	last := -1.0
	quietSince := time.Now()
	for {
		counts := reconcileCounts()
		var total float64
		for _, n := range counts {
			total += n
		}
		switch now := time.Now(); {
		case total != last || busy():
			last, quietSince = total, now
		case now.Sub(quietSince) >= opts.quiet && (done == nil || done(counts)):
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the operator did not settle within %s (reconciles so far: %v)", opts.timeout, counts)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// reconciledEveryObject is whether, since before, every Agent, ToolSource
// and MediaStore was reconciled at least once more.
func reconciledEveryObject(before, now map[string]float64, opts options) bool {
	groups := float64(referenceGroups(opts))
	return now["agent"]-before["agent"] >= float64(opts.agents) &&
		now["toolsource"]-before["toolsource"] >= groups &&
		now["mediastore"]-before["mediastore"] >= groups
}

func reconcileDelta(before, now map[string]float64) string {
	parts := make([]string, 0, len(controllers))
	for _, c := range controllers {
		parts = append(parts, fmt.Sprintf("%s %.0f", c, now[c]-before[c]))
	}
	return strings.Join(parts, ", ")
}

// writeCounter counts write requests at the API server: the operator's own
// from the audit log, and every user's from apiserver_request_total.
type writeCounter struct {
	auditLog string
	metrics  rest.Interface
}

// writeMark is where counting starts.
type writeMark struct {
	auditOffset int64
	requests    map[requestKey]float64
}

// requestKey is one row of apiserver_request_total, summed over codes.
type requestKey struct {
	resource, verb string
}

// auditKey is one kind of write in the audit log.
type auditKey struct {
	resource, verb string
	code           int
}

// writes are the write requests made since a mark.
type writes struct {
	byOperator map[auditKey]int
	byAnyone   map[requestKey]float64
}

// operatorResources are the resources the operator writes; the counter
// reports writes to these alone.
var operatorResources = map[string]bool{
	"agents": true, "agents/status": true, "toolsources/status": true, "mediastores": true, "mediastores/status": true,
	"configmaps": true, "serviceaccounts": true, "deployments": true, "deployments/scale": true,
}

var writeVerbs = map[string]bool{"POST": true, "PUT": true, "PATCH": true, "APPLY": true, "DELETE": true, "DELETECOLLECTION": true}

func (w *writeCounter) mark(ctx context.Context) (writeMark, error) {
	info, err := os.Stat(w.auditLog)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return writeMark{}, err
	}
	var offset int64
	if info != nil {
		offset = info.Size()
	}
	requests, err := w.requests(ctx)
	return writeMark{auditOffset: offset, requests: requests}, err
}

func (w *writeCounter) since(ctx context.Context, m writeMark) (writes, error) {
	out := writes{byOperator: map[auditKey]int{}, byAnyone: map[requestKey]float64{}}
	f, err := os.Open(w.auditLog)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = nil // nothing written yet
		}
		return out, err
	}
	defer func() { _ = f.Close() }()
	if _, err := f.Seek(m.auditOffset, io.SeekStart); err != nil {
		return out, err
	}
	lines := bufio.NewScanner(f)
	lines.Buffer(make([]byte, 0, 1<<20), 16<<20)
	for lines.Scan() {
		var event struct {
			Verb string `json:"verb"`
			User struct {
				Username string `json:"username"`
			} `json:"user"`
			ObjectRef struct {
				Resource    string `json:"resource"`
				Subresource string `json:"subresource"`
			} `json:"objectRef"`
			ResponseStatus struct {
				Code int `json:"code"`
			} `json:"responseStatus"`
		}
		if err := json.Unmarshal(lines.Bytes(), &event); err != nil {
			return out, fmt.Errorf("reading the audit log: %w", err)
		}
		if event.User.Username != operatorUser {
			continue
		}
		out.byOperator[auditKey{resource: resourceName(event.ObjectRef.Resource, event.ObjectRef.Subresource), verb: event.Verb, code: event.ResponseStatus.Code}]++
	}
	if err := lines.Err(); err != nil {
		return out, err
	}
	now, err := w.requests(ctx)
	for k, n := range now {
		if d := n - m.requests[k]; d > 0 {
			out.byAnyone[k] = d
		}
	}
	return out, err
}

// requests reads apiserver_request_total for writes to the operator's
// resources.
func (w *writeCounter) requests(ctx context.Context) (map[requestKey]float64, error) {
	body, err := w.metrics.Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the API server's metrics: %w", err)
	}
	out := map[requestKey]float64{}
	for line := range strings.SplitSeq(string(body), "\n") {
		name, labels, value, ok := parseSample(line)
		if !ok || name != "apiserver_request_total" || !writeVerbs[labels["verb"]] {
			continue
		}
		resource := resourceName(labels["resource"], labels["subresource"])
		if operatorResources[resource] {
			out[requestKey{resource: resource, verb: labels["verb"]}] += value
		}
	}
	return out, nil
}

func resourceName(resource, subresource string) string {
	if subresource == "" {
		return resource
	}
	return resource + "/" + subresource
}

func (w writes) total() int {
	n := 0
	for _, c := range w.byOperator {
		n += c
	}
	return n
}

func (w writes) print(out io.Writer) {
	if len(w.byOperator) == 0 {
		fmt.Fprintln(out, "  audit log, operator's user: no writes")
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.byOperator), func(a, b auditKey) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	}) {
		fmt.Fprintf(out, "  audit log, operator's user: %-20s %-7s %d  %d\n", k.resource, k.verb, k.code, w.byOperator[k])
	}
	if len(w.byAnyone) == 0 {
		fmt.Fprintln(out, "  apiserver_request_total, all users: no writes to the operator's resources")
	}
	for _, k := range slices.SortedFunc(maps.Keys(w.byAnyone), func(a, b requestKey) int {
		return strings.Compare(fmt.Sprint(a), fmt.Sprint(b))
	}) {
		fmt.Fprintf(out, "  apiserver_request_total, all users: %-20s %-7s %.0f\n", k.resource, k.verb, w.byAnyone[k])
	}
}

// parseSample reads one line of the Prometheus text format.
func parseSample(line string) (name string, labels map[string]string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", nil, 0, false
	}
	labels = map[string]string{}
	rest := line
	if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
		name, rest = line[:i], line[i+1:]
		for {
			rest = strings.TrimLeft(rest, ",")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, "=\"")
			if eq < 0 {
				return "", nil, 0, false
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			for {
				if rest == "" {
					return "", nil, 0, false
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					c, rest = rest[0], rest[1:]
					if c == 'n' {
						c = '\n'
					}
				}
				v.WriteByte(c)
			}
			labels[key] = v.String()
		}
	} else {
		name, rest, _ = strings.Cut(line, " ")
	}
	fields := strings.Fields(rest)
	if len(fields) == 0 {
		return "", nil, 0, false
	}
	value, err := strconv.ParseFloat(fields[0], 64)
	return name, labels, value, err == nil
}
