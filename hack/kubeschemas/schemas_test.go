package main

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func TestSchemaFileName(t *testing.T) {
	for _, tc := range []struct {
		group, version, kind, want string
	}{
		{"", "v1", "Pod", "pod-v1.json"},
		{"apps", "v1", "Deployment", "deployment-apps-v1.json"},
		{"rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterrole-rbac-v1.json"},
		{"agents.stepwise.run", "v1alpha1", "MediaStore", "mediastore-agents-v1alpha1.json"},
	} {
		if got := SchemaFileName(tc.group, tc.version, tc.kind); got != tc.want {
			t.Errorf("SchemaFileName(%q, %q, %q) = %q, want %q", tc.group, tc.version, tc.kind, got, tc.want)
		}
	}
}

// components is a small OpenAPI v3 components.schemas in the API server's
// shape: a kind with a reference to a recursive type, a nullable field, a
// field that keeps unknown fields, an int-or-string and a map.
const components = `{
  "io.example.v1.Widget": {
    "type": "object",
    "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
    "properties": {
      "apiVersion": {"type": "string"},
      "kind": {"type": "string"},
      "spec": {"allOf": [{"$ref": "#/components/schemas/io.example.v1.Node"}], "default": {"$ref": "not a keyword"}},
      "note": {"type": "string", "nullable": true, "enum": ["a", "b"]},
      "raw": {"type": "object", "properties": {"known": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true},
      "port": {"$ref": "#/components/schemas/io.example.IntOrString"},
      "labels": {"type": "object", "additionalProperties": {"type": "string"}}
    }
  },
  "io.example.v1.Node": {
    "type": "object",
    "properties": {
      "name": {"type": "string"},
      "enum": {"$ref": "#/components/schemas/io.example.v1.JSON"},
      "children": {"type": "array", "items": {"$ref": "#/components/schemas/io.example.v1.Node"}}
    }
  },
  "io.example.v1.JSON": {"description": "any value"},
  "io.example.IntOrString": {"type": "string", "format": "int-or-string"},
  "io.example.v1.Unused": {"type": "object", "properties": {"x": {"type": "string"}}}
}`

func TestKubeconformSchemasWritesOneStrictSelfContainedFilePerKind(t *testing.T) {
	var in map[string]any
	if err := json.Unmarshal([]byte(components), &in); err != nil {
		t.Fatal(err)
	}
	files, err := KubeconformSchemas(in)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files["widget-example-v1.json"] == nil {
		t.Fatalf("files = %v, want only widget-example-v1.json", keys(files))
	}
	var got map[string]any
	if err := json.Unmarshal(files["widget-example-v1.json"], &got); err != nil {
		t.Fatal(err)
	}
	want := `{
  "$schema": "http://json-schema.org/draft-04/schema#",
  "type": "object",
  "additionalProperties": false,
  "x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
  "properties": {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "spec": {"allOf": [{"$ref": "#/definitions/io.example.v1.Node"}], "default": {"$ref": "not a keyword"}},
    "note": {"type": ["string", "null"], "enum": ["a", "b", null]},
    "raw": {"type": "object", "properties": {"known": {"type": "string"}}, "x-kubernetes-preserve-unknown-fields": true},
    "port": {"$ref": "#/definitions/io.example.IntOrString"},
    "labels": {"type": "object", "additionalProperties": {"type": "string"}}
  },
  "definitions": {
    "io.example.v1.Node": {
      "type": "object",
      "additionalProperties": false,
      "properties": {
        "name": {"type": "string"},
        "enum": {"$ref": "#/definitions/io.example.v1.JSON"},
        "children": {"type": "array", "items": {"$ref": "#/definitions/io.example.v1.Node"}}
      }
    },
    "io.example.v1.JSON": {"description": "any value"},
    "io.example.IntOrString": {"type": ["integer", "string"]}
  }
}`
	var wantDoc map[string]any
	if err := json.Unmarshal([]byte(want), &wantDoc); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, wantDoc) {
		gotJSON, _ := json.MarshalIndent(got, "", "  ")
		t.Errorf("widget-example-v1.json =\n%s\nwant\n%s", gotJSON, want)
	}
}

func TestKubeconformSchemasRefusesWhatItCannotWrite(t *testing.T) {
	for _, tc := range []struct {
		name, components, wantErr string
	}{
		{
			name: "dangling reference",
			components: `{"io.example.v1.Widget": {"x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
				"properties": {"spec": {"$ref": "#/components/schemas/io.example.v1.Missing"}}}}`,
			wantErr: `schema io.example.v1.Widget: $ref "#/components/schemas/io.example.v1.Missing" names no schema of the API server`,
		},
		{
			name: "reference outside the components",
			components: `{"io.example.v1.Widget": {"x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}],
				"properties": {"spec": {"$ref": "https://example.com/schema.json"}}}}`,
			wantErr: `$ref "https://example.com/schema.json" does not point into components.schemas`,
		},
		{
			name: "two kinds one file",
			components: `{
				"io.example.v1.Widget": {"x-kubernetes-group-version-kind": [{"group": "example.io", "version": "v1", "kind": "Widget"}]},
				"io.other.v1.Widget": {"x-kubernetes-group-version-kind": [{"group": "example.net", "version": "v1", "kind": "Widget"}]}}`,
			wantErr: "schemas io.example.v1.Widget and io.other.v1.Widget both map to widget-example-v1.json",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var in map[string]any
			if err := json.Unmarshal([]byte(tc.components), &in); err != nil {
				t.Fatal(err)
			}
			_, err := KubeconformSchemas(in)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for key := range m {
		out = append(out, key)
	}
	return out
}
