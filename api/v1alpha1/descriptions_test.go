package v1alpha1_test

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"
)

// TestEveryFieldHasADescription keeps `kubectl explain` useful: every field
// of every generated CRD, at any depth, carries the description its doc
// comment gives. Only the object metadata, which Kubernetes documents, is
// exempt.
func TestEveryFieldHasADescription(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "config", "crd", "bases", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no generated CRDs under config/crd/bases (%v): run make manifests", err)
	}
	for _, file := range files {
		raw, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(raw, &crd); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		for _, version := range crd.Spec.Versions {
			if version.Schema == nil || version.Schema.OpenAPIV3Schema == nil {
				t.Errorf("%s %s: no schema", crd.Name, version.Name)
				continue
			}
			root := version.Schema.OpenAPIV3Schema
			var missing []string
			for name, prop := range root.Properties {
				if name == "metadata" {
					continue
				}
				missing = append(missing, undescribed(crd.Spec.Names.Singular+"."+name, prop)...)
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("%s %s: fields without a description (give them a doc comment):\n  %s",
					crd.Name, version.Name, strings.Join(missing, "\n  "))
			}
		}
	}
}

// undescribed lists the fields at and under path that have no description,
// going through array items and map values as kubectl explain does.
func undescribed(path string, s apiextensionsv1.JSONSchemaProps) []string {
	var missing []string
	if strings.TrimSpace(s.Description) == "" {
		missing = append(missing, path)
	}
	missing = append(missing, nested(path, s)...)
	return missing
}

func nested(path string, s apiextensionsv1.JSONSchemaProps) []string {
	var missing []string
	for name, prop := range s.Properties {
		missing = append(missing, undescribed(path+"."+name, prop)...)
	}
	if s.Items != nil && s.Items.Schema != nil {
		missing = append(missing, nested(path+"[]", *s.Items.Schema)...)
	}
	if s.AdditionalProperties != nil && s.AdditionalProperties.Schema != nil {
		missing = append(missing, nested(path+"{}", *s.AdditionalProperties.Schema)...)
	}
	return missing
}
