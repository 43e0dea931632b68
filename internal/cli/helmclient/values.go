package helmclient

import "fmt"

// Value returns the value at path in nested Helm values, such as a
// release's Values, or nil.
func Value(values map[string]any, path ...string) any {
	var cur any = values
	for _, key := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[key]
	}
	return cur
}

// String returns the string at path in nested Helm values, or "".
func String(values map[string]any, path ...string) string {
	s, _ := Value(values, path...).(string)
	return s
}

// Bool returns the bool at path in nested Helm values, or false.
func Bool(values map[string]any, path ...string) bool {
	b, _ := Value(values, path...).(bool)
	return b
}

// Strings returns the value at path in nested Helm values that is one
// string or a list, such as network.podCIDR; nil when it is neither or
// empty.
func Strings(values map[string]any, path ...string) []string {
	switch v := Value(values, path...).(type) {
	case string:
		if v != "" {
			return []string{v}
		}
	case []any:
		out := make([]string, 0, len(v))
		for _, item := range v {
			out = append(out, fmt.Sprint(item))
		}
		return out
	}
	return nil
}
