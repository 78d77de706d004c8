package e2e

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/enginetest"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/testcluster"
	"github.com/stepwise-run/stepwise/internal/tools/mcp/mcptest"
	sessions "github.com/stepwise-run/stepwise/pkg/client"
)

// forwardToPods makes a loopback server of this host reachable from pods
// and returns the address they use.
func forwardToPods(t *testing.T, rawURL string) string {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	f, err := testcluster.Forward(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return f.Address()
}

// shortSum is how the demo model names an image it was shown.
func shortSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:6])
}

// imagesOnTheCluster runs an Agent whose MediaStore is an S3 bucket, with
// its credentials in a Secret, and an MCP tool source that returns an
// image. A PNG sent with `stepwise send --image` reaches the model in a
// worker pod, and the MCP tool's image is uploaded by the pod and shown in
// the next model call.
func imagesOnTheCluster(t *testing.T) {
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "media")
	s3ForPods := "http://" + forwardToPods(t, gw.Endpoint)
	ledger := mcptest.NewLedger(t)
	ledgerForPods := "http://" + forwardToPods(t, ledger.URL)
	traces := enginetest.StartOTLPReceiver(t)
	tracesForPods := "http://" + forwardToPods(t, "http://"+traces.Address)
	apply(t, fmt.Sprintf(`apiVersion: v1
kind: Secret
metadata:
  name: viewer-s3
  namespace: default
stringData:
  AWS_ACCESS_KEY_ID: %s
  AWS_SECRET_ACCESS_KEY: %s
---
apiVersion: agents.stepwise.run/v1alpha1
kind: MediaStore
metadata:
  name: viewer-media
  namespace: default
spec:
  s3:
    bucket: media
    prefix: sessions
    endpoint: %s
    region: us-east-1
    forcePathStyle: true
    credentialsSecretRef: {name: viewer-s3}
---
apiVersion: agents.stepwise.run/v1alpha1
kind: ToolSource
metadata:
  name: charts
  namespace: default
spec:
  mcp:
    streamableHTTP:
      url: %s
  trustToolAnnotations: true
---
apiVersion: agents.stepwise.run/v1alpha1
kind: Agent
metadata:
  name: viewer
  namespace: default
spec:
  flowType: ViewerAgent
  instructions: You look at charts.
  model: {provider: scripted, name: demo}
  toolSources: [{name: charts}]
  mediaStore: {name: viewer-media}
  tracing: {endpoint: %s}
  workers:
    image: %s
    engineVersion: %s
    replicas: 1
`, gw.AccessKeyID, gw.SecretAccessKey, s3ForPods, ledgerForPods, tracesForPods, image("agent-worker"), engineVersionOf(t)))
	agent := waitAgent(t, "viewer", func(a *agentsv1.Agent) bool { return a.Status.ReadyReplicas == 1 })
	workerPods(t, "viewer", 1)
	var store agentsv1.MediaStore
	if err := kube.Get(context.Background(), client.ObjectKey{Namespace: "default", Name: "viewer-media"}, &store); err != nil {
		t.Fatal(err)
	}
	if store.Status.StoreURI != "s3://media/sessions" {
		t.Fatalf("the MediaStore's status names %q", store.Status.StoreURI)
	}

	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	s := sessions.New(engine.Client(), sessions.AgentOf(agent))
	const id = "chart-1"
	if ok, err := s.Start(ctx, id, ""); err != nil || !ok {
		t.Fatalf("starting %s: %v %v", id, ok, err)
	}

	// The CLI runs where a person would: beside the cluster, uploading to
	// the bucket the MediaStore's status names.
	cli := filepath.Join(t.TempDir(), "stepwise")
	if out, err := exec.Command("go", "build", "-o", cli, "../../cmd/stepwise").CombinedOutput(); err != nil {
		t.Fatalf("building the CLI: %v\n%s", err, out)
	}
	png := mediatest.PNG(16, 9, 4)
	file := filepath.Join(t.TempDir(), "chart.png")
	if err := os.WriteFile(file, png, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cli, "--address", engine.FrontendHostPort(), "--agent", agent.Namespace+"/"+agent.Name, "--flow-type", agent.Spec.FlowType, "--task-queue", agent.Status.TaskQueue,
		"--media-store", store.Status.StoreURI, "--s3-endpoint", gw.Endpoint, "--s3-region", "us-east-1", "--s3-path-style",
		"--image", file, "send", id, "What is in this chart?")
	cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+gw.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+gw.SecretAccessKey, "AWS_EC2_METADATA_DISABLED=true")
	if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "true" {
		t.Fatalf("stepwise send --image: %v\n%s", err, out)
	}
	want := "Demo reply: What is in this chart? (images: " + shortSum(png) + ")"
	if got := lastAssistant(t, s, id, 1); got != want {
		t.Fatalf("the model in the pod answered %q; want %q", got, want)
	}

	// The pod calls the MCP tool, uploads its image to the bucket, and the
	// next model call shows both images.
	if ok, err := s.Send(ctx, id, `call charts__gallery {"amount":1}`); err != nil || !ok {
		t.Fatalf("sending the tool call: %v %v", ok, err)
	}
	chart := mediatest.PNG(2, 2, 0)
	want = "Done. charts__gallery: charts\n[image 1]\nend (images: " + shortSum(png) + ", " + shortSum(chart) + ")"
	if got := lastAssistant(t, s, id, 2); got != want {
		t.Fatalf("the model in the pod answered %q; want %q", got, want)
	}
	pngRef, _ := media.BuildReference(png, store.Status.StoreURI)
	chartRef, _ := media.BuildReference(chart, store.Status.StoreURI)
	out, err := gw.Client(t).ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String("media")})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	if len(keys) != 2 || !strings.Contains(strings.Join(keys, " "), pngRef.SHA256) || !strings.Contains(strings.Join(keys, " "), chartRef.SHA256) {
		t.Errorf("the bucket holds %v; want the PNG and the tool's chart", keys)
	}
	snap, err := s.Snapshot(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	var shown []string
	for _, m := range snap.Messages {
		for _, img := range m.Images {
			shown = append(shown, string(m.Role)+":"+img.SHA256)
		}
	}
	if strings.Join(shown, " ") != "user:"+pngRef.SHA256+" tool:"+chartRef.SHA256 {
		t.Errorf("the snapshot shows images %v", shown)
	}
	tracedOnPods(t, traces, ledger, id)
}

// tracedOnPods holds the spans the worker pod exported for a session: a
// root per user message, and the MCP call's span, whose trace context the
// MCP server received in _meta.
func tracedOnPods(t *testing.T, traces *enginetest.OTLPReceiver, ledger *mcptest.Ledger, id string) {
	t.Helper()
	var roots, tools []enginetest.ReceivedSpan
	waitFor(t, "the worker pod's spans of "+id, func() (bool, error) {
		roots, tools = nil, nil
		for _, sp := range traces.Spans() {
			if sp.Attributes["session.id"] != id {
				continue
			}
			switch sp.Name {
			case "invoke_agent ViewerAgent":
				roots = append(roots, sp)
			case "execute_tool charts__gallery":
				tools = append(tools, sp)
			}
		}
		return len(roots) == 2 && len(tools) == 1, nil
	})
	if roots[1].Links == nil || roots[1].Links[0] != roots[0].TraceID+"/"+roots[0].SpanID {
		t.Errorf("the second message's root links %v, want the first's", roots[1].Links)
	}
	if tools[0].TraceID != roots[1].TraceID || tools[0].ParentSpanID != roots[1].SpanID {
		t.Errorf("the tool's span is in %s under %s, want the second message's root", tools[0].TraceID, tools[0].ParentSpanID)
	}
	calls := ledger.CallsOf("gallery")
	if len(calls) != 1 || !strings.HasPrefix(calls[0].Traceparent, "00-"+tools[0].TraceID+"-"+tools[0].SpanID+"-") {
		t.Errorf("the MCP server received %+v, want the tool span's trace context in _meta", calls)
	}
}

// lastAssistant waits for the session's turn to end and returns the
// assistant's last text.
func lastAssistant(t *testing.T, s *sessions.Sessions, id string, turns int) string {
	t.Helper()
	var last string
	waitFor(t, fmt.Sprintf("turn %d of %s to end", turns, id), func() (bool, error) {
		snap, err := s.Snapshot(context.Background(), id)
		if err != nil || snap.State == nil || snap.State.TurnCount < turns || snap.State.ActiveTurnID != "" {
			return false, nil
		}
		if snap.State.LastTurnError != "" {
			return false, fmt.Errorf("turn %d failed: %s", turns, snap.State.LastTurnError)
		}
		last = snap.Messages[len(snap.Messages)-1].Text
		return true, nil
	})
	return last
}
