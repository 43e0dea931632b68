package install

import "strings"

// maxClusterNameLen is the longest DNS-1123 label.
const maxClusterNameLen = 63

// SanitizeClusterName turns a kubeconfig context name or a detected name into
// a DNS-1123 label: lowercase, only [a-z0-9-], at most 63 characters, with no
// leading or trailing dash. Every run of other characters becomes one dash, so
// "gke_my-project_europe-west1_prod" gives "gke-my-project-europe-west1-prod".
// It returns "" when nothing usable remains.
func SanitizeClusterName(s string) string {
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(s) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
			dash = false
			continue
		}
		if !dash {
			b.WriteByte('-')
			dash = true
		}
	}
	out := strings.Trim(b.String(), "-")
	if len(out) > maxClusterNameLen {
		out = strings.TrimRight(out[:maxClusterNameLen], "-")
	}
	return out
}
