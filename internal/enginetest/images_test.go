package enginetest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	agentsv1 "github.com/stepwise-run/stepwise/api/v1alpha1"
	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/render"
	"github.com/stepwise-run/stepwise/internal/testtools"
	"github.com/stepwise-run/stepwise/pkg/client"
	"github.com/stepwise-run/stepwise/pkg/workerconfig"
)

// tinyImageTool is server-everything's tool that returns a PNG between
// two texts, as the model calls it.
const tinyImageTool = "everything__get-tiny-image"

// imageStack is the stock worker, rendered for a provider at baseURL, with
// an S3 media store (credentials from the rendered Secret variables) and
// server-everything as a stdio tool source.
func imageStack(t *testing.T, flowType string, provider agentsv1.ModelProvider, baseURL string, gw *mediatest.S3Server, endpoint string) *Stack {
	t.Helper()
	dir := testtools.MCPServers.Path(t)
	s := NewStack(t, flowType)
	renderedConfig(t, s, provider, baseURL)
	id := workerconfig.SecretEnv{Env: render.SecretEnvName("s3", render.S3AccessKeyIDKey), Secret: "s3", Key: render.S3AccessKeyIDKey}
	secret := workerconfig.SecretEnv{Env: render.SecretEnvName("s3", render.S3SecretAccessKeyKey), Secret: "s3", Key: render.S3SecretAccessKeyKey}
	s.Config.MediaStore = &workerconfig.MediaStore{StoreURI: "s3://media/sessions", S3: &workerconfig.S3MediaStore{
		Bucket: "media", Prefix: "sessions", Endpoint: endpoint, Region: "us-east-1", ForcePathStyle: true,
		AccessKeyID: &id, SecretAccessKey: &secret,
	}}
	s.Env = append(s.Env, id.Env+"="+gw.AccessKeyID, secret.Env+"="+gw.SecretAccessKey)
	s.Config.ToolSources = []workerconfig.ToolSource{{
		SourceName: "everything", TrustToolAnnotations: true,
		ConnectionTimeout: metav1.Duration{Duration: 30 * time.Second}, RequestTimeout: metav1.Duration{Duration: time.Minute},
		Stdio: &workerconfig.Stdio{Command: filepath.Join(dir, "mcp-server-everything"), Args: []string{"stdio"}},
	}}
	return s
}

// findObject reports whether a JSON value holds an object that match takes.
func findObject(v any, match func(map[string]any) bool) bool {
	switch v := v.(type) {
	case map[string]any:
		if match(v) {
			return true
		}
		for _, child := range v {
			if findObject(child, match) {
				return true
			}
		}
	case []any:
		for _, child := range v {
			if findObject(child, match) {
				return true
			}
		}
	}
	return false
}

// shows reports whether a provider request shows the model an image with
// these bytes, in the provider's own format: inside a tool result when
// inResult, else in a user message.
func shows(t *testing.T, provider agentsv1.ModelProvider, request string, data []byte, inResult bool) bool {
	t.Helper()
	var body any
	if err := json.Unmarshal([]byte(request), &body); err != nil {
		t.Fatalf("the request is not JSON: %v", err)
	}
	b64 := base64.StdEncoding.EncodeToString(data)
	dataURL := "data:image/png;base64," + b64
	switch provider {
	case agentsv1.ModelProviderOpenAI:
		return findObject(body, func(o map[string]any) bool {
			if inResult && o["type"] != "function_call_output" || !inResult && o["role"] != "user" {
				return false
			}
			return findObject(o, func(p map[string]any) bool { return p["type"] == "input_image" && p["image_url"] == dataURL })
		})
	case agentsv1.ModelProviderOpenAICompatible:
		// Tool messages take text only: a tool result's images follow in a
		// user message that names the call.
		return findObject(body, func(o map[string]any) bool {
			if o["role"] != "user" {
				return false
			}
			if inResult && !findObject(o, func(p map[string]any) bool {
				text, _ := p["text"].(string)
				return p["type"] == "text" && strings.HasPrefix(text, "The "+tinyImageTool+" tool call ")
			}) {
				return false
			}
			return findObject(o, func(p map[string]any) bool {
				u, _ := p["image_url"].(map[string]any)
				return p["type"] == "image_url" && u != nil && u["url"] == dataURL
			})
		})
	default:
		return findObject(body, func(o map[string]any) bool {
			if inResult && o["type"] != "tool_result" || !inResult && o["role"] != "user" {
				return false
			}
			return findObject(o, func(p map[string]any) bool {
				src, _ := p["source"].(map[string]any)
				return p["type"] == "image" && src != nil && src["data"] == b64 && src["media_type"] == "image/png"
			})
		})
	}
}

// A PNG sent from the command line reaches each provider in its format, the
// MCP tool's image is uploaded inside its Step and shown in the next model
// call, and the snapshot shows both references.
func TestImagesFromTheCLIAndAnMCPToolReachEachProvider(t *testing.T) {
	cli := buildBinary(t, "../../cmd/stepwise")
	tiny := tinyImageBytes(t)
	for _, tc := range []struct {
		provider agentsv1.ModelProvider
		path     string
	}{
		{agentsv1.ModelProviderOpenAI, "/v1"},
		{agentsv1.ModelProviderOpenAICompatible, "/v1"},
		{agentsv1.ModelProviderAnthropic, ""},
	} {
		t.Run(string(tc.provider), func(t *testing.T) {
			ctx := context.Background()
			gw := mediatest.StartS3(t)
			gw.CreateBucket(t, "media")
			fake := &fakeProvider{t: t, provider: tc.provider, tool: tinyImageTool}
			srv := httptest.NewServer(http.HandlerFunc(fake.serve))
			defer srv.Close()
			s := imageStack(t, "Images"+strings.ReplaceAll(string(tc.provider), "-", ""), tc.provider, srv.URL+tc.path, gw, gw.Endpoint)
			s.StartWorker()
			sessions := client.New(s.Client, s.Agent())
			if ok, err := sessions.Start(ctx, "look", ""); !ok || err != nil {
				t.Fatalf("Start = %v, %v", ok, err)
			}

			png := mediatest.PNG(12, 8, 3)
			file := filepath.Join(t.TempDir(), "chart.png")
			if err := os.WriteFile(file, png, 0o600); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(cli, "--address", s.Server.FrontendHostPort(), "--flow-type", s.FlowType, "--agent", s.Config.Agent.Namespace+"/"+s.Config.Agent.Name,
				"--media-store", "s3://media/sessions", "--s3-endpoint", gw.Endpoint, "--s3-region", "us-east-1", "--s3-path-style",
				"--image", file, "send", "look", "What is in this chart?")
			cmd.Env = append(os.Environ(), "AWS_ACCESS_KEY_ID="+gw.AccessKeyID, "AWS_SECRET_ACCESS_KEY="+gw.SecretAccessKey)
			if out, err := cmd.CombinedOutput(); err != nil || strings.TrimSpace(string(out)) != "true" {
				t.Fatalf("stepwise send --image: %v\n%s", err, out)
			}
			if answer := lastAnswer(t, sessions, "look", 1); answer != "waited 2" {
				t.Fatalf("the answer is %q", answer)
			}

			fake.mu.Lock()
			requests := append([]string(nil), fake.requests...)
			fake.mu.Unlock()
			if len(requests) != 2 {
				t.Fatalf("the provider got %d requests, want 2", len(requests))
			}
			if !shows(t, tc.provider, requests[0], png, false) {
				t.Errorf("the first model call does not show the PNG in a user message:\n%s", requests[0])
			}
			if !shows(t, tc.provider, requests[1], png, false) || !shows(t, tc.provider, requests[1], tiny, true) {
				t.Errorf("the second model call does not show both images:\n%s", requests[1])
			}

			snap, err := sessions.Snapshot(ctx, "look")
			if err != nil {
				t.Fatal(err)
			}
			pngRef, _ := media.BuildReference(png, "s3://media/sessions")
			tinyRef, _ := media.BuildReference(tiny, "s3://media/sessions")
			var user, result *client.Message
			for i, m := range snap.Messages {
				switch m.Role {
				case client.RoleUser:
					user = &snap.Messages[i]
				case client.RoleTool:
					result = &snap.Messages[i]
				}
			}
			if user == nil || len(user.Images) != 1 || user.Images[0] != client.ImageReference(pngRef) {
				t.Errorf("the user message shows %+v, want %+v", user, pngRef)
			}
			if result == nil || len(result.Images) != 1 || result.Images[0] != client.ImageReference(tinyRef) ||
				!strings.Contains(result.Text, "[image 1]") {
				t.Errorf("the tool result shows %+v, want the tiny image", result)
			}
			keys := bucketKeys(t, gw, "media")
			if strings.Join(keys, ",") != strings.Join(sortedKeys("sessions/sha256/"+pngRef.SHA256, "sessions/sha256/"+tinyRef.SHA256), ",") {
				t.Errorf("the bucket holds %v", keys)
			}

			// An image gone from the bucket fails the next turn that replays
			// it, after its user message, with the store's error.
			if _, err := gw.Client(t).DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String("media"), Key: aws.String("sessions/sha256/" + pngRef.SHA256)}); err != nil {
				t.Fatal(err)
			}
			if ok, err := sessions.Send(ctx, "look", "and now?"); !ok || err != nil {
				t.Fatalf("Send = %v, %v", ok, err)
			}
			Eventually(t, waitLong, "turn 2 to fail", func() (bool, error) {
				snap, err := sessions.Snapshot(ctx, "look")
				return err == nil && snap.State != nil && snap.State.TurnCount == 2 && snap.State.ActiveTurnID == "", err
			})
			snap, err = sessions.Snapshot(ctx, "look")
			if err != nil {
				t.Fatal(err)
			}
			if e := snap.State.LastTurnError; !strings.Contains(e, "media store") || !strings.Contains(e, pngRef.URI) || !strings.Contains(e, "does not exist") {
				t.Errorf("the failed turn's error is %q", e)
			}
			if last := snap.Messages[len(snap.Messages)-1]; last.Role != client.RoleUser || last.Text != "and now?" {
				t.Errorf("the failed turn stored %+v last", last)
			}
			fake.mu.Lock()
			calls := len(fake.requests)
			fake.mu.Unlock()
			if calls != 2 {
				t.Errorf("the provider got %d requests; a turn whose image is gone sends none", calls)
			}
		})
	}
}

func tinyImageBytes(t *testing.T) []byte {
	t.Helper()
	src, err := os.ReadFile(filepath.Join(testtools.MCPServers.Path(t), "..", "@modelcontextprotocol", "server-everything", "dist", "tools", "get-tiny-image.js"))
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ := strings.Cut(string(src), `MCP_TINY_IMAGE = "`)
	encoded, _, _ := strings.Cut(rest, `"`)
	data, err := base64.StdEncoding.DecodeString(encoded)
	if err != nil || media.Sniff(data) != media.MIMEPNG {
		t.Fatalf("server-everything's tiny image: %v", err)
	}
	return data
}

func bucketKeys(t *testing.T, gw *mediatest.S3Server, bucket string) []string {
	t.Helper()
	out, err := gw.Client(t).ListObjectsV2(context.Background(), &s3.ListObjectsV2Input{Bucket: aws.String(bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, o := range out.Contents {
		keys = append(keys, aws.ToString(o.Key))
	}
	return keys
}

func sortedKeys(keys ...string) []string {
	out := slices.Clone(keys)
	slices.Sort(out)
	return out
}

// heldUpload is a proxy before the S3 server that lets the first upload
// reach the server, then holds its answer until released, so a worker can
// be killed after its image is stored but before it knows.
type heldUpload struct {
	mu      sync.Mutex
	puts    []int // the status of every upload, in order
	reached chan struct{}
	release chan struct{}
}

func (h *heldUpload) serve(target *url.URL) http.Handler {
	rp := httputil.NewSingleHostReverseProxy(target)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut {
			rp.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		rp.ServeHTTP(rec, r)
		h.mu.Lock()
		h.puts = append(h.puts, rec.Code)
		first := len(h.puts) == 1
		h.mu.Unlock()
		if first {
			close(h.reached)
			<-h.release
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = io.Copy(w, rec.Body)
	})
}

// A worker killed after the MCP tool's image reached the store, before the
// tool Step finished, is replaced: the read tool runs again, its upload
// finds the same object (412), and the bucket holds one image.
func TestAWorkerKilledMidUploadRetriesToTheSameObject(t *testing.T) {
	ctx := context.Background()
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "media")
	target, _ := url.Parse(gw.Endpoint)
	held := &heldUpload{reached: make(chan struct{}), release: make(chan struct{})}
	proxy := httptest.NewServer(held.serve(target))
	defer proxy.Close()
	defer close(held.release)
	fake := &fakeProvider{t: t, provider: agentsv1.ModelProviderOpenAI, tool: tinyImageTool}
	srv := httptest.NewServer(http.HandlerFunc(fake.serve))
	defer srv.Close()
	s := imageStack(t, "ImagesCrash", agentsv1.ModelProviderOpenAI, srv.URL+"/v1", gw, proxy.URL)
	first := s.StartWorker()
	sessions := client.New(s.Client, s.Agent())
	if ok, err := sessions.Start(ctx, "crash", "show me the logo"); !ok || err != nil {
		t.Fatalf("Start = %v, %v", ok, err)
	}
	select {
	case <-held.reached:
	case <-time.After(waitLong):
		t.Fatal("the tool's upload never reached the store")
	}
	first.Kill()
	s.StartWorker()
	if answer := lastAnswer(t, sessions, "crash", 1); answer != "waited 2" {
		t.Fatalf("the answer is %q", answer)
	}
	tinyRef, _ := media.BuildReference(tinyImageBytes(t), "s3://media/sessions")
	held.mu.Lock()
	puts := append([]int(nil), held.puts...)
	held.mu.Unlock()
	if len(puts) != 2 || puts[0] != http.StatusOK || puts[1] != http.StatusPreconditionFailed {
		t.Errorf("uploads answered %v, want 200 and then 412 for the retried Step", puts)
	}
	if keys := bucketKeys(t, gw, "media"); len(keys) != 1 || keys[0] != "sessions/sha256/"+tinyRef.SHA256 {
		t.Errorf("the bucket holds %v", keys)
	}
	snap, err := sessions.Snapshot(ctx, "crash")
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range snap.Messages {
		if m.Role == client.RoleTool && (len(m.Images) != 1 || m.Images[0].SHA256 != tinyRef.SHA256) {
			t.Errorf("the tool result shows %+v", m.Images)
		}
	}
}
