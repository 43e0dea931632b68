package app

import "testing"

func TestMemoryLimitLeavesTheBinaryItsRoom(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want int64
		ok   bool
	}{
		{"the chart's 256Mi", map[string]string{memoryLimitEnv: "268435456"}, 192 << 20, true},
		{"1Gi", map[string]string{memoryLimitEnv: "1073741824"}, 960 << 20, true},
		{"96Mi: half of it at least", map[string]string{memoryLimitEnv: "100663296"}, 48 << 20, true},
		{"GOMEMLIMIT set wins", map[string]string{memoryLimitEnv: "268435456", "GOMEMLIMIT": "100MiB"}, 0, false},
		{"no limit", map[string]string{}, 0, false},
		{"not a number", map[string]string{memoryLimitEnv: "256Mi"}, 0, false},
		{"zero", map[string]string{memoryLimitEnv: "0"}, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := memoryLimit(func(k string) string { return tc.env[k] })
			if got != tc.want || ok != tc.ok {
				t.Errorf("memoryLimit = %d, %t; want %d, %t", got, ok, tc.want, tc.ok)
			}
		})
	}
}
