package mediatest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/stepwise-run/stepwise/internal/testtools"
)

// S3Server is a versitygw S3 gateway with its posix backend, listening on
// loopback for one test.
type S3Server struct {
	// Endpoint is the gateway's URL.
	Endpoint string
	// AccessKeyID and SecretAccessKey are its root user's fixed keys.
	AccessKeyID, SecretAccessKey string
	// Dir is the backend's directory: each bucket is a directory in it.
	Dir string
}

// StartS3 starts a gateway for the test and stops it at the test's end. Its
// port is chosen free but released before the gateway binds it, so another
// process may take it first; the gateway then exits saying so and is
// started again on a fresh port.
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	bin := testtools.S3Server.Path(t)
	dir := filepath.Join(t.TempDir(), "s3")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	const attempts = 5
	for attempt := 1; ; attempt++ {
		s, log := startS3(t, bin, dir)
		if s != nil {
			return s
		}
		if attempt == attempts || !strings.Contains(log, "address already in use") {
			t.Fatalf("versitygw did not answer:\n%s", log)
		}
	}
}

// startS3 starts one gateway on a free port and waits until it answers; a
// gateway that does not is reported with its log.
func startS3(t testing.TB, bin, dir string) (*S3Server, string) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	s := &S3Server{
		Endpoint:        "http://" + addr,
		AccessKeyID:     "stepwise-test",
		SecretAccessKey: "stepwise-test-secret",
		Dir:             dir,
	}
	cmd := exec.Command(bin, "--port", addr, "--access", s.AccessKeyID, "--secret", s.SecretAccessKey, "--quiet", "posix", s.Dir)
	logFile, err := os.Create(filepath.Join(t.TempDir(), "versitygw.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
		_ = logFile.Close()
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.Endpoint + "/")
		if err == nil {
			_ = resp.Body.Close()
			return s, ""
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Sprintf("versitygw on %s exited: %s", addr, log)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(logFile.Name())
			return nil, fmt.Sprintf("versitygw did not answer on %s within 30s: %v\n%s", addr, err, log)
		}
	}
}

// Client is an S3 client of the gateway's root user, for a test to make
// buckets and to look at or change objects behind a store's back.
func (s *S3Server) Client(t testing.TB) *s3.Client {
	t.Helper()
	cfg, err := config.LoadDefaultConfig(context.Background(),
		config.WithRegion("us-east-1"),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider(s.AccessKeyID, s.SecretAccessKey, "")),
		config.WithRequestChecksumCalculation(aws.RequestChecksumCalculationWhenRequired),
		config.WithResponseChecksumValidation(aws.ResponseChecksumValidationWhenRequired))
	if err != nil {
		t.Fatal(err)
	}
	return s3.NewFromConfig(cfg, func(o *s3.Options) {
		o.BaseEndpoint = aws.String(s.Endpoint)
		o.UsePathStyle = true
	})
}

// CreateBucket makes a bucket.
func (s *S3Server) CreateBucket(t testing.TB, bucket string) {
	t.Helper()
	if _, err := s.Client(t).CreateBucket(context.Background(), &s3.CreateBucketInput{Bucket: aws.String(bucket)}); err != nil {
		t.Fatal(fmt.Errorf("creating bucket %s: %w", bucket, err))
	}
}
