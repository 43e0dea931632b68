package status

import (
	"helm.sh/helm/v3/pkg/chartutil"
)

// lookup returns the value at path in nested Helm values, or nil.
func lookup(values map[string]any, path ...string) any {
	var cur any = values
	for _, key := range path {
		switch m := cur.(type) {
		case map[string]any:
			cur = m[key]
		case chartutil.Values:
			cur = m[key]
		default:
			return nil
		}
	}
	return cur
}

// stringValue returns the string at path in nested Helm values, or "".
func stringValue(values map[string]any, path ...string) string {
	s, _ := lookup(values, path...).(string)
	return s
}
