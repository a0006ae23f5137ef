package api_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/labelkit/labels/api"
)

// The document is well formed: OpenAPI 3.1, every $ref resolves, every
// operation has a unique operationId and documented responses, every
// response and parameter says what it is. httpapi's TestOpenAPI holds it to
// the implementation.
func TestDocumentIsWellFormed(t *testing.T) {
	t.Parallel()
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(api.OpenAPI, &doc))
	require.Equal(t, "3.1.0", doc["openapi"])
	require.NotEmpty(t, doc["info"].(map[string]any)["title"])

	var refs []string
	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				if k == "$ref" {
					refs = append(refs, fmt.Sprintf("%s → %v", path, e))
					_, err := lookup(doc, e.(string))
					require.NoError(t, err, "%s: $ref %v", path, e)
					continue
				}
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s/%d", path, i), e)
			}
		}
	}
	walk("", doc)
	require.NotEmpty(t, refs)

	ids := map[string]string{}
	for p, item := range doc["paths"].(map[string]any) {
		require.True(t, strings.HasPrefix(p, "/"), p)
		for method, op := range item.(map[string]any) {
			op := op.(map[string]any)
			where := strings.ToUpper(method) + " " + p
			id, _ := op["operationId"].(string)
			require.NotEmpty(t, id, where)
			require.Empty(t, ids[id], "%s: operationId %s also on %s", where, id, ids[id])
			ids[id] = where
			responses := op["responses"].(map[string]any)
			require.NotEmpty(t, responses, where)
			for status, r := range responses {
				r := resolve(t, doc, r)
				require.NotEmpty(t, r["description"], "%s %s: no description", where, status)
				content, _ := r["content"].(map[string]any)
				for ct, media := range content {
					require.NotNil(t, media.(map[string]any)["schema"], "%s %s %s: no schema", where, status, ct)
				}
				headers, _ := r["headers"].(map[string]any)
				for h, hv := range headers {
					require.NotNil(t, resolve(t, doc, hv)["schema"], "%s %s header %s: no schema", where, status, h)
				}
			}
			params, _ := op["parameters"].([]any)
			for _, pv := range params {
				param := resolve(t, doc, pv)
				require.Contains(t, []string{"path", "query", "header"}, param["in"], where)
				require.NotNil(t, param["schema"], "%s parameter %v: no schema", where, param["name"])
				if param["in"] == "path" {
					require.Equal(t, true, param["required"], "%s: path parameters are required", where)
					require.Contains(t, p, "{"+param["name"].(string)+"}", where)
				}
			}
		}
	}
	for _, op := range []string{"createLabel", "getLabelRequest", "findLabelRequest", "getLabel", "healthz", "readyz", "metrics", "openapi"} {
		require.NotEmpty(t, ids[op], "operation %s is documented", op)
	}
}

func resolve(t *testing.T, doc map[string]any, v any) map[string]any {
	t.Helper()
	m := v.(map[string]any)
	for m["$ref"] != nil {
		r, err := lookup(doc, m["$ref"].(string))
		require.NoError(t, err)
		m = r.(map[string]any)
	}
	return m
}

// lookup resolves a local reference, "#/a/b".
func lookup(doc map[string]any, ref string) (any, error) {
	if !strings.HasPrefix(ref, "#/") {
		return nil, fmt.Errorf("only local references are used, not %q", ref)
	}
	var v any = doc
	for _, tok := range strings.Split(ref[2:], "/") {
		tok = strings.NewReplacer("~1", "/", "~0", "~").Replace(tok)
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("%s: %q is not in an object", ref, tok)
		}
		if v, ok = m[tok]; !ok {
			return nil, fmt.Errorf("%s: no %q", ref, tok)
		}
	}
	return v, nil
}
