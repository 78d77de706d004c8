package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// componentRefPrefix starts every $ref inside an OpenAPI v3 document.
const componentRefPrefix = "#/components/schemas/"

// definitionRefPrefix starts every $ref inside a written schema file, which
// carries the definitions it needs beside its root.
const definitionRefPrefix = "#/definitions/"

// draft4 is the JSON Schema draft the files declare: kubeconform compiles
// schemas without $schema as draft 4, and OpenAPI 3.0's schema objects
// (boolean exclusiveMinimum, $ref beside nothing) follow its rules.
const draft4 = "http://json-schema.org/draft-04/schema#"

// groupVersionKind is one entry of an OpenAPI schema's
// x-kubernetes-group-version-kind: the kinds whose objects the schema
// describes.
type groupVersionKind struct {
	Group   string `json:"group"`
	Version string `json:"version"`
	Kind    string `json:"kind"`
}

// apiVersion spells the group and version as manifests do.
func (gvk groupVersionKind) apiVersion() string {
	if gvk.Group == "" {
		return gvk.Version
	}
	return gvk.Group + "/" + gvk.Version
}

// SchemaFileName is the file kubeconform reads for a kind under the schema
// location template {{ .ResourceKind }}{{ .KindSuffix }}.json: the kind in
// lower case, the first label of the group, and the version, so
// apps/v1 Deployment is deployment-apps-v1.json and v1 Pod is pod-v1.json.
func SchemaFileName(group, version, kind string) string {
	if group == "" {
		return strings.ToLower(kind) + "-" + strings.ToLower(version) + ".json"
	}
	firstLabel, _, _ := strings.Cut(group, ".")
	return strings.ToLower(kind) + "-" + strings.ToLower(firstLabel) + "-" + strings.ToLower(version) + ".json"
}

// KubeconformSchemas turns the API server's OpenAPI v3 schemas (every
// document's components.schemas, merged by name) into kubeconform's schema
// files, one per kind and version, keyed by file name. Each file is a
// self-contained draft-4 schema whose definitions hold every schema its root
// refers to, directly or not, so recursive types such as a CRD's
// JSONSchemaProps stay finite. Files are strict: an object with properties
// and no additionalProperties refuses other fields, as the API server
// drops or refuses them, unless it keeps unknown fields
// (x-kubernetes-preserve-unknown-fields). Nullable values accept null, and
// int-or-string values accept both.
func KubeconformSchemas(components map[string]any) (map[string][]byte, error) {
	files := map[string][]byte{}
	writtenFrom := map[string]string{}
	for _, name := range slices.Sorted(maps.Keys(components)) {
		schema, ok := components[name].(map[string]any)
		if !ok {
			return nil, fmt.Errorf("schema %s is a %T, not an object", name, components[name])
		}
		gvks, err := kindsOf(name, schema)
		if err != nil {
			return nil, err
		}
		if len(gvks) == 0 {
			continue
		}
		file, err := standaloneSchema(name, schema, components)
		if err != nil {
			return nil, err
		}
		for _, gvk := range gvks {
			fileName := SchemaFileName(gvk.Group, gvk.Version, gvk.Kind)
			if earlier, taken := writtenFrom[fileName]; taken && earlier != name {
				return nil, fmt.Errorf("schemas %s and %s both map to %s (%s %s): kubeconform could not tell them apart",
					earlier, name, fileName, gvk.apiVersion(), gvk.Kind)
			}
			writtenFrom[fileName] = name
			files[fileName] = file
		}
	}
	return files, nil
}

// kindsOf reads a schema's x-kubernetes-group-version-kind.
func kindsOf(name string, schema map[string]any) ([]groupVersionKind, error) {
	raw, ok := schema["x-kubernetes-group-version-kind"]
	if !ok {
		return nil, nil
	}
	data, err := json.Marshal(raw)
	if err != nil {
		return nil, err
	}
	var gvks []groupVersionKind
	if err := json.Unmarshal(data, &gvks); err != nil {
		return nil, fmt.Errorf("schema %s: x-kubernetes-group-version-kind: %w", name, err)
	}
	return gvks, nil
}

// standaloneSchema builds one file: the root schema, strict, with the
// definitions it reaches.
func standaloneSchema(name string, root map[string]any, components map[string]any) ([]byte, error) {
	reached := map[string]bool{}
	if err := collectRefs(root, components, reached); err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	doc := strictSchema(root).(map[string]any)
	doc["$schema"] = draft4
	if len(reached) > 0 {
		definitions := map[string]any{}
		for ref := range reached {
			definitions[ref] = strictSchema(components[ref])
		}
		doc["definitions"] = definitions
	}
	return json.MarshalIndent(doc, "", "  ")
}

// collectRefs adds to reached every component a schema refers to, and the
// ones those refer to.
func collectRefs(node any, components map[string]any, reached map[string]bool) error {
	schema, ok := node.(map[string]any)
	if !ok {
		return nil
	}
	if ref, ok := schema["$ref"].(string); ok {
		target, found := strings.CutPrefix(ref, componentRefPrefix)
		if !found {
			return fmt.Errorf("$ref %q does not point into components.schemas", ref)
		}
		if _, known := components[target]; !known {
			return fmt.Errorf("$ref %q names no schema of the API server", ref)
		}
		if !reached[target] {
			reached[target] = true
			if err := collectRefs(components[target], components, reached); err != nil {
				return err
			}
		}
	}
	for _, child := range subschemas(schema) {
		if err := collectRefs(child, components, reached); err != nil {
			return err
		}
	}
	return nil
}

// subschemas lists the schemas directly inside a schema, reading only the
// keywords that hold schemas: a default value's "$ref" key, or a property
// named "enum", is no keyword.
func subschemas(schema map[string]any) []any {
	var children []any
	for key, value := range schema {
		switch key {
		case "properties", "patternProperties", "definitions":
			named, _ := value.(map[string]any)
			for _, child := range named {
				children = append(children, child)
			}
		case "items", "additionalProperties", "not":
			if list, ok := value.([]any); ok {
				children = append(children, list...)
			} else {
				children = append(children, value)
			}
		case "allOf", "anyOf", "oneOf":
			list, _ := value.([]any)
			children = append(children, list...)
		}
	}
	return children
}

// strictSchema returns a copy of an OpenAPI schema as draft-4 JSON Schema
// that refuses what the API server would not keep.
func strictSchema(node any) any {
	schema, ok := node.(map[string]any)
	if !ok {
		return node
	}
	out := make(map[string]any, len(schema)+1)
	for key, value := range schema {
		switch key {
		case "$ref":
			out[key] = definitionRefPrefix + jsonPointerEscape(strings.TrimPrefix(value.(string), componentRefPrefix))
		case "properties", "patternProperties", "definitions":
			children := map[string]any{}
			if named, ok := value.(map[string]any); ok {
				for child, childSchema := range named {
					children[child] = strictSchema(childSchema)
				}
			}
			out[key] = children
		case "items", "additionalProperties", "not":
			if list, ok := value.([]any); ok {
				out[key] = strictSchemas(list)
			} else {
				out[key] = strictSchema(value)
			}
		case "allOf", "anyOf", "oneOf":
			list, _ := value.([]any)
			out[key] = strictSchemas(list)
		default:
			out[key] = value
		}
	}
	if _, hasProperties := out["properties"]; hasProperties && out["additionalProperties"] == nil && !keepsUnknownFields(out) {
		out["additionalProperties"] = false
	}
	if out["format"] == "int-or-string" {
		delete(out, "format")
		out["type"] = []any{"integer", "string"}
	}
	if out["x-kubernetes-int-or-string"] == true {
		if _, typed := out["type"]; typed {
			out["type"] = []any{"integer", "string"}
		}
	}
	if out["nullable"] == true {
		delete(out, "nullable")
		return acceptNull(out)
	}
	return out
}

func strictSchemas(list []any) []any {
	out := make([]any, len(list))
	for i, child := range list {
		out[i] = strictSchema(child)
	}
	return out
}

// keepsUnknownFields tells an object whose unknown fields the API server
// keeps.
func keepsUnknownFields(schema map[string]any) bool {
	return schema["x-kubernetes-preserve-unknown-fields"] == true
}

// acceptNull widens a nullable schema to accept null, as OpenAPI's
// nullable does and draft 4 has no word for.
func acceptNull(schema map[string]any) any {
	switch typ := schema["type"].(type) {
	case string:
		schema["type"] = []any{typ, "null"}
	case []any:
		if !slices.Contains(typ, any("null")) {
			schema["type"] = append(slices.Clone(typ), "null")
		}
	default:
		return map[string]any{"anyOf": []any{map[string]any{"type": "null"}, schema}}
	}
	if enum, ok := schema["enum"].([]any); ok && !slices.Contains(enum, nil) {
		schema["enum"] = append(slices.Clone(enum), nil)
	}
	return schema
}

// jsonPointerEscape escapes a definition name for a JSON pointer.
func jsonPointerEscape(name string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(name)
}
