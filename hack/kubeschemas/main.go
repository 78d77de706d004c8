// Command kubeschemas writes the JSON schemas kubeconform checks manifests
// against, taken from a real API server: it starts kube-apiserver and etcd
// with the project's CRDs installed, reads the server's OpenAPI v3 documents,
// and writes one strict schema file per kind and version, so the objects
// the chart renders are checked against exactly the API the operator is
// built for, CRDs included, without downloading anything.
//
// Use the output with
//
//	kubeconform -strict -schema-location 'DIR/{{ .ResourceKind }}{{ .KindSuffix }}.json'
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

func main() {
	var opts options
	flag.StringVar(&opts.assets, "assets", os.Getenv("KUBEBUILDER_ASSETS"),
		"Directory with kube-apiserver and etcd (default $KUBEBUILDER_ASSETS).")
	flag.StringVar(&opts.crds, "crds", "config/crd/bases", "Directories of the CRDs to install before reading the API, separated by commas.")
	flag.StringVar(&opts.out, "out", "", "Directory to write the schema files to; its *.json files are replaced.")
	flag.DurationVar(&opts.timeout, "timeout", 2*time.Minute, "How long to wait for the API server to publish the CRDs' schemas.")
	flag.Parse()
	if err := run(opts, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "kubeschemas:", err)
		os.Exit(1)
	}
}

type options struct {
	assets, crds, out string
	timeout           time.Duration
}

func run(opts options, out io.Writer) (err error) {
	if opts.assets == "" {
		return errors.New("--assets (or KUBEBUILDER_ASSETS) must name the directory with kube-apiserver and etcd: run `make envtest`")
	}
	if opts.out == "" {
		return errors.New("--out must name the directory for the schema files")
	}
	env := &envtest.Environment{
		BinaryAssetsDirectory: opts.assets,
		CRDDirectoryPaths:     strings.Split(opts.crds, ","),
		ErrorIfCRDPathMissing: true,
	}
	cfg, err := env.Start()
	if err != nil {
		return fmt.Errorf("starting the API server: %w", err)
	}
	defer func() {
		if stopErr := env.Stop(); stopErr != nil && err == nil {
			err = fmt.Errorf("stopping the API server: %w", stopErr)
		}
	}()

	ctx, cancel := context.WithTimeout(context.Background(), opts.timeout)
	defer cancel()
	components, err := readComponents(ctx, cfg, crdKinds(env.CRDs))
	if err != nil {
		return err
	}
	files, err := KubeconformSchemas(components)
	if err != nil {
		return err
	}
	if err := writeFiles(opts.out, files); err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "wrote %d schemas to %s\n", len(files), opts.out)
	return err
}

// crdKinds names the schema files the installed CRDs must produce, so the
// API server is read only once it publishes them.
func crdKinds(crds []*apiextensionsv1.CustomResourceDefinition) []string {
	var names []string
	for _, crd := range crds {
		for _, version := range crd.Spec.Versions {
			if version.Served {
				names = append(names, SchemaFileName(crd.Spec.Group, version.Name, crd.Spec.Names.Kind))
			}
		}
	}
	return names
}

// readComponents reads every OpenAPI v3 document the API server publishes
// and merges their components.schemas by name, retrying until the schemas
// of every wanted file are there: the server publishes a CRD's schema a
// moment after the CRD is established.
func readComponents(ctx context.Context, cfg *rest.Config, wantFiles []string) (map[string]any, error) {
	client, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	for {
		components, err := readComponentsOnce(ctx, client.RESTClient())
		if err != nil {
			return nil, err
		}
		missing := missingFiles(components, wantFiles)
		if len(missing) == 0 {
			return components, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("the API server did not publish the schemas of %s: %w", strings.Join(missing, ", "), ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func readComponentsOnce(ctx context.Context, client rest.Interface) (map[string]any, error) {
	var index struct {
		Paths map[string]struct {
			ServerRelativeURL string `json:"serverRelativeURL"`
		} `json:"paths"`
	}
	if err := getJSON(ctx, client, "/openapi/v3", &index); err != nil {
		return nil, err
	}
	components := map[string]any{}
	for _, path := range slices.Sorted(maps.Keys(index.Paths)) {
		var doc struct {
			Components struct {
				Schemas map[string]any `json:"schemas"`
			} `json:"components"`
		}
		if err := getJSON(ctx, client, index.Paths[path].ServerRelativeURL, &doc); err != nil {
			return nil, err
		}
		for name, schema := range doc.Components.Schemas {
			if _, seen := components[name]; !seen {
				components[name] = schema
			}
		}
	}
	return components, nil
}

func getJSON(ctx context.Context, client rest.Interface, url string, into any) error {
	path, query, _ := strings.Cut(url, "?")
	req := client.Get().AbsPath(path).SetHeader("Accept", "application/json")
	if query != "" {
		for _, pair := range strings.Split(query, "&") {
			key, value, _ := strings.Cut(pair, "=")
			req = req.Param(key, value)
		}
	}
	body, err := req.DoRaw(ctx)
	if err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	if err := json.Unmarshal(body, into); err != nil {
		return fmt.Errorf("reading %s: %w", url, err)
	}
	return nil
}

func missingFiles(components map[string]any, wantFiles []string) []string {
	have := map[string]bool{}
	for name, schema := range components {
		object, _ := schema.(map[string]any)
		gvks, err := kindsOf(name, object)
		if err != nil {
			continue
		}
		for _, gvk := range gvks {
			have[SchemaFileName(gvk.Group, gvk.Version, gvk.Kind)] = true
		}
	}
	var missing []string
	for _, file := range wantFiles {
		if !have[file] {
			missing = append(missing, file)
		}
	}
	return missing
}

// writeFiles replaces the directory's schema files with these.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	old, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return err
	}
	for _, file := range old {
		if err := os.Remove(file); err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if err := os.WriteFile(filepath.Join(dir, name), files[name], 0o644); err != nil {
			return err
		}
	}
	return nil
}
