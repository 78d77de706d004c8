// Package searchattr registers the custom search attributes sessions need
// in a Temporal namespace: the Steps a session is in, and the Agent that
// owns it. The operator registers them on every engine it runs Agents on;
// workers make sure of them before they start, and the tests' dev server
// has them from the start.
package searchattr

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/stepwise-run/stepwise/internal/tenancy"
)

// Needed are the custom search attributes sessions need, by name.
var Needed = map[string]enumspb.IndexedValueType{
	tenancy.AttributeActiveSteps: enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST,
	tenancy.AttributeNamespace:   enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	tenancy.AttributeAgent:       enumspb.INDEXED_VALUE_TYPE_KEYWORD,
	tenancy.AttributeAgentUID:    enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

// Ensure registers the needed search attributes in the namespace where they
// are missing, and refuses one registered with another type. Where the
// caller may not manage search attributes, an administrator registers them
// once, as Command says.
func Ensure(ctx context.Context, c client.Client, namespace string) error {
	list, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return fmt.Errorf("listing the search attributes of namespace %s: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range slices.Sorted(maps.Keys(Needed)) {
		want := Needed[name]
		kind, ok := list.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = want
		case kind != want:
			return fmt.Errorf("search attribute %s of namespace %s is %s, not %s", name, namespace, kind, want)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	_, err = c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: namespace, SearchAttributes: missing})
	if err != nil {
		return fmt.Errorf("registering search attributes %s in namespace %s: %w", strings.Join(slices.Sorted(maps.Keys(missing)), ", "), namespace, err)
	}
	return nil
}

// Command is how an administrator registers the needed search attributes
// in a namespace with the Temporal CLI.
func Command(namespace string) string {
	var parts []string
	for _, name := range slices.Sorted(maps.Keys(Needed)) {
		kind := "Keyword"
		if Needed[name] == enumspb.INDEXED_VALUE_TYPE_KEYWORD_LIST {
			kind = "KeywordList"
		}
		parts = append(parts, fmt.Sprintf("temporal operator search-attribute create --namespace %s --name %s --type %s", namespace, name, kind))
	}
	return strings.Join(parts, "; ")
}
