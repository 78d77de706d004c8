package s3store_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/stepwise-run/stepwise/internal/media"
	"github.com/stepwise-run/stepwise/internal/media/mediatest"
	"github.com/stepwise-run/stepwise/internal/media/s3store"
)

// proxy stands between a store and the real gateway: it records every
// request and its answer, and can answer some requests itself, as a
// service that conflicts or refuses conditional writes would.
type proxy struct {
	mu       sync.Mutex
	requests []string // "METHOD key status"
	// answer, when set, may answer a request itself with a status.
	answer func(r *http.Request) int
	server *httptest.Server
}

func newProxy(t *testing.T, gw *mediatest.S3Server) *proxy {
	target, err := url.Parse(gw.Endpoint)
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	p.server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		answer := p.answer
		p.mu.Unlock()
		if answer != nil {
			if status := answer(r); status != 0 {
				_, _ = io.Copy(io.Discard, r.Body)
				p.record(r, status)
				w.Header().Set("Content-Type", "application/xml")
				w.WriteHeader(status)
				_, _ = fmt.Fprintf(w, "<Error><Code>%s</Code><Message>injected</Message></Error>", codeOf(status))
				return
			}
		}
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		rp.ServeHTTP(rec, r)
		p.record(r, rec.status)
	}))
	t.Cleanup(p.server.Close)
	return p
}

func codeOf(status int) string {
	switch status {
	case http.StatusConflict:
		return "ConditionalRequestConflict"
	case http.StatusNotImplemented:
		return "NotImplemented"
	}
	return "InternalError"
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(status int) {
	w.status = status
	w.ResponseWriter.WriteHeader(status)
}

func (p *proxy) record(r *http.Request, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cond := ""
	if r.Header.Get("If-None-Match") != "" {
		cond = " if-none-match"
	}
	p.requests = append(p.requests, fmt.Sprintf("%s%s %d", r.Method, cond, status))
}

// take returns the requests recorded since the last take.
func (p *proxy) take() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := p.requests
	p.requests = nil
	return out
}

func (p *proxy) setAnswer(f func(*http.Request) int) {
	p.mu.Lock()
	p.answer = f
	p.mu.Unlock()
}

func newStore(t *testing.T, endpoint string, gw *mediatest.S3Server, bucket, prefix string) *s3store.Store {
	t.Helper()
	s, err := s3store.New(context.Background(), s3store.Options{
		Bucket: bucket, Prefix: prefix, Endpoint: endpoint, Region: "us-east-1", ForcePathStyle: true,
		Credentials: s3store.StaticCredentials(gw.AccessKeyID, gw.SecretAccessKey, ""),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func objectKeys(t *testing.T, gw *mediatest.S3Server, bucket string) []string {
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

func equal(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }

func TestPutAndGet(t *testing.T) {
	ctx := context.Background()
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "agent-media")
	p := newProxy(t, gw)
	store := newStore(t, p.server.URL, gw, "agent-media", "sessions/eu")
	if store.StoreURI() != "s3://agent-media/sessions/eu" {
		t.Fatalf("StoreURI = %s", store.StoreURI())
	}

	png := mediatest.PNG(16, 16, 1)
	ref, err := store.PutImage(ctx, png)
	if err != nil {
		t.Fatal(err)
	}
	if want := "s3://agent-media/sessions/eu/sha256/" + ref.SHA256; ref.URI != want || ref.MIMEType != "image/png" || ref.SizeBytes != int64(len(png)) {
		t.Errorf("reference %+v, want URI %s", ref, want)
	}
	if got := p.take(); !equal(got, []string{"PUT if-none-match 200"}) {
		t.Errorf("first upload sent %v, want one conditional PUT", got)
	}
	if keys := objectKeys(t, gw, "agent-media"); !equal(keys, []string{"sessions/eu/sha256/" + ref.SHA256}) {
		t.Errorf("objects %v", keys)
	}

	// The same bytes again: the service answers 412 and that is success.
	again, err := store.PutImage(ctx, png)
	if err != nil || again != ref {
		t.Fatalf("second upload: %+v, %v", again, err)
	}
	if got := p.take(); !equal(got, []string{"PUT if-none-match 412"}) {
		t.Errorf("second upload sent %v, want one conditional PUT answered 412", got)
	}

	// Many writers of one image at once write one object.
	jpg := mediatest.JPEG(32, 32, 2)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := store.PutImage(ctx, jpg)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Errorf("concurrent upload: %v", err)
		}
	}
	if keys := objectKeys(t, gw, "agent-media"); len(keys) != 2 {
		t.Errorf("after 8 concurrent uploads of one image: %v", keys)
	}

	got, err := store.GetImage(ctx, ref)
	if err != nil || !bytes.Equal(got, png) {
		t.Fatalf("GetImage: %d bytes, %v", len(got), err)
	}

	for name, data := range map[string][]byte{"not an image": []byte("%PDF-1.7"), "empty": nil} {
		p.take()
		if _, err := store.PutImage(ctx, data); !errors.Is(err, media.ErrInvalidImage) {
			t.Errorf("%s: PutImage = %v, want an invalid image", name, err)
		}
		if got := p.take(); len(got) != 0 {
			t.Errorf("%s: sent %v before refusing", name, got)
		}
	}
}

func TestConflicts(t *testing.T) {
	ctx := context.Background()
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "media")
	p := newProxy(t, gw)
	store := newStore(t, p.server.URL, gw, "media", "")

	// Two conflicts, then the upload goes through.
	conflicts := 0
	p.setAnswer(func(r *http.Request) int {
		if r.Method == http.MethodPut && conflicts < 2 {
			conflicts++
			return http.StatusConflict
		}
		return 0
	})
	ref, err := store.PutImage(ctx, mediatest.GIF(4, 4, 1))
	if err != nil {
		t.Fatal(err)
	}
	if got := p.take(); !equal(got, []string{"PUT if-none-match 409", "PUT if-none-match 409", "PUT if-none-match 200"}) {
		t.Errorf("sent %v", got)
	}
	if keys := objectKeys(t, gw, "media"); !equal(keys, []string{"sha256/" + ref.SHA256}) {
		t.Errorf("objects %v", keys)
	}

	// Every attempt conflicts: a HEAD must find the object.
	p.setAnswer(func(r *http.Request) int {
		if r.Method == http.MethodPut {
			return http.StatusConflict
		}
		return 0
	})
	if _, err := store.PutImage(ctx, mediatest.GIF(4, 4, 1)); err != nil {
		t.Errorf("conflicts on an image that exists: %v", err)
	}
	if got := p.take(); !equal(got, []string{"PUT if-none-match 409", "PUT if-none-match 409", "PUT if-none-match 409", "HEAD 200"}) {
		t.Errorf("sent %v", got)
	}
	_, err = store.PutImage(ctx, mediatest.GIF(4, 4, 2))
	if !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), "3 uploads conflicted") {
		t.Errorf("conflicts on an image that does not exist: %v", err)
	}
	if got := p.take(); !equal(got, []string{"PUT if-none-match 409", "PUT if-none-match 409", "PUT if-none-match 409", "HEAD 404"}) {
		t.Errorf("sent %v", got)
	}
}

func TestServiceWithoutConditionalWrites(t *testing.T) {
	ctx := context.Background()
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "media")
	p := newProxy(t, gw)
	store := newStore(t, p.server.URL, gw, "media", "p")
	p.setAnswer(func(r *http.Request) int {
		if r.Header.Get("If-None-Match") != "" {
			return http.StatusNotImplemented
		}
		return 0
	})
	png := mediatest.PNG(3, 3, 9)
	ref, err := store.PutImage(ctx, png)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.take(); !equal(got, []string{"PUT if-none-match 501", "HEAD 404", "PUT 200"}) {
		t.Errorf("first upload sent %v", got)
	}
	// From then on the store checks first and writes only what is missing.
	if _, err := store.PutImage(ctx, png); err != nil {
		t.Fatal(err)
	}
	if got := p.take(); !equal(got, []string{"HEAD 200"}) {
		t.Errorf("upload of an existing image sent %v", got)
	}
	if _, err := store.PutImage(ctx, mediatest.PNG(3, 3, 10)); err != nil {
		t.Fatal(err)
	}
	if got := p.take(); !equal(got, []string{"HEAD 404", "PUT 200"}) {
		t.Errorf("upload of a new image sent %v", got)
	}
	if got, err := store.GetImage(ctx, ref); err != nil || !bytes.Equal(got, png) {
		t.Errorf("GetImage: %v", err)
	}
}

func TestReadsAreConfinedAndVerified(t *testing.T) {
	ctx := context.Background()
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "media")
	gw.CreateBucket(t, "other")
	p := newProxy(t, gw)
	store := newStore(t, p.server.URL, gw, "media", "team-a")
	otherPrefix := newStore(t, gw.Endpoint, gw, "media", "team-b")
	otherBucket := newStore(t, gw.Endpoint, gw, "other", "team-a")

	png := mediatest.PNG(8, 8, 4)
	for _, s := range []*s3store.Store{otherPrefix, otherBucket} {
		ref, err := s.PutImage(ctx, png)
		if err != nil {
			t.Fatal(err)
		}
		p.take()
		if _, err := store.GetImage(ctx, ref); !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), "not in this store") {
			t.Errorf("read of %s: %v", ref.URI, err)
		}
		if got := p.take(); len(got) != 0 {
			t.Errorf("read of another store's image sent %v", got)
		}
	}

	// An object changed behind the store's back is refused: another size
	// by its Content-Length, the same size by its hash.
	ref, err := store.PutImage(ctx, png)
	if err != nil {
		t.Fatal(err)
	}
	overwrite := func(data []byte) {
		if _, err := gw.Client(t).PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("media"),
			Key: aws.String("team-a/sha256/" + ref.SHA256), Body: bytes.NewReader(data)}); err != nil {
			t.Fatal(err)
		}
	}
	overwrite(append(bytes.Clone(png), 0))
	if _, err := store.GetImage(ctx, ref); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("the object has %d bytes", len(png)+1)) {
		t.Errorf("longer object: %v", err)
	}
	changed := bytes.Clone(png)
	changed[len(changed)-5] ^= 0xFF
	overwrite(changed)
	if _, err := store.GetImage(ctx, ref); err == nil || !strings.Contains(err.Error(), "SHA-256") {
		t.Errorf("changed object: %v", err)
	}

	// A body longer than its reference without a Content-Length: the store
	// stops one byte past the size.
	overwrite(png)
	p.setAnswer(nil)
	streaming := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(png)
		w.(http.Flusher).Flush()
		_, _ = w.Write(make([]byte, 1<<20))
	}))
	defer streaming.Close()
	liar := newStore(t, streaming.URL, gw, "media", "team-a")
	if _, err := liar.GetImage(ctx, ref); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("read %d bytes", len(png)+1)) {
		t.Errorf("an endless body: %v", err)
	}

	// A missing object is the store's error, naming the image.
	gone := media.Reference{Type: "image", URI: "s3://media/team-a/sha256/" + strings.Repeat("a", 64),
		MIMEType: "image/png", SHA256: strings.Repeat("a", 64), SizeBytes: 10}
	if _, err := store.GetImage(ctx, gone); !errors.Is(err, media.ErrStore) || !strings.Contains(err.Error(), "does not exist") ||
		!strings.Contains(err.Error(), gone.URI) {
		t.Errorf("missing object: %v", err)
	}
}

func TestCredentialsStayOutOfErrors(t *testing.T) {
	ctx := context.Background()
	gw := mediatest.StartS3(t)
	gw.CreateBucket(t, "media")
	const secret = "not-the-gateways-secret-1234"
	store, err := s3store.New(ctx, s3store.Options{Bucket: "media", Endpoint: gw.Endpoint, ForcePathStyle: true,
		Credentials: s3store.StaticCredentials(gw.AccessKeyID, secret, "token-5678")})
	if err != nil {
		t.Fatal(err)
	}
	_, err = store.PutImage(ctx, mediatest.PNG(2, 2, 2))
	if !errors.Is(err, media.ErrStore) {
		t.Fatalf("upload with a wrong secret: %v", err)
	}
	for _, text := range []string{err.Error(), fmt.Sprintf("%v %+v %s", store, store, store)} {
		if strings.Contains(text, secret) || strings.Contains(text, "token-5678") {
			t.Errorf("a credential shows: %s", text)
		}
	}

	if _, err := s3store.New(ctx, s3store.Options{Bucket: strings.Repeat("b", 63), Prefix: strings.Repeat("p", 900)}); err == nil {
		t.Error("a prefix that makes URIs over 1024 bytes was taken")
	}
}
