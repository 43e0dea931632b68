package status

// lookup returns the value at path in nested Helm values, or nil.
func lookup(values map[string]any, path ...string) any {
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

// stringValue returns the string at path in nested Helm values, or "".
func stringValue(values map[string]any, path ...string) string {
	s, _ := lookup(values, path...).(string)
	return s
}

// boolValue returns the bool at path in nested Helm values, or false.
func boolValue(values map[string]any, path ...string) bool {
	b, _ := lookup(values, path...).(bool)
	return b
}
