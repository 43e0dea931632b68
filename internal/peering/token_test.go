package peering

import (
	"errors"
	"maps"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
)

func TestParseToken(t *testing.T) {
	tests := []struct {
		name   string
		input  string
		want   Token
		wantOK bool
	}{
		{name: "a well formed token parses", input: "abc123.0123456789abcdef", want: Token{ID: "abc123", Secret: "0123456789abcdef"}, wantOK: true},
		{name: "surrounding blanks are ignored", input: "  abc123.0123456789abcdef\n", want: Token{ID: "abc123", Secret: "0123456789abcdef"}, wantOK: true},
		{name: "an empty string is refused", input: ""},
		{name: "a token without a dot is refused", input: "abc1230123456789abcdef"},
		{name: "a short id is refused", input: "abc12.0123456789abcdef"},
		{name: "a long id is refused", input: "abc1234.0123456789abcdef"},
		{name: "a short secret is refused", input: "abc123.0123456789abcde"},
		{name: "a long secret is refused", input: "abc123.0123456789abcdef0"},
		{name: "uppercase is refused", input: "ABC123.0123456789ABCDEF"},
		{name: "an extra dot is refused", input: "abc123.01234567.9abcdef"},
		{name: "a trailing dot is refused", input: "abc123.0123456789abcdef."},
		{name: "a space inside is refused", input: "abc123. 123456789abcdef"},
		{name: "unicode letters are refused", input: "abc123.0123456789abcdéf"},
		{name: "a look-alike digit is refused", input: "abc123.０123456789abcdef"},
		{name: "a newline inside is refused", input: "abc123.0123456789\nbcdef"},
		{name: "a token with a prefix is refused", input: "x abc123.0123456789abcdef"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseToken(tt.input)
			if !tt.wantOK {
				if !errors.Is(err, ErrMalformedToken) {
					t.Fatalf("ParseToken = %v, want ErrMalformedToken", err)
				}
				if strings.TrimSpace(tt.input) != "" && strings.Contains(err.Error(), strings.TrimSpace(tt.input)) {
					t.Errorf("the error echoes the input: %v", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("ParseToken = %+v, %v; want %+v", got, err, tt.want)
			}
			if got.String() != strings.TrimSpace(tt.input) {
				t.Errorf("String() = %q, want the canonical input", got.String())
			}
		})
	}
}

func TestGeneratedTokensAreWellFormedAndUnique(t *testing.T) {
	format := regexp.MustCompile(`^[a-z0-9]{6}\.[a-z0-9]{16}$`)
	seen := map[string]bool{}
	for range 1000 {
		tok, err := GenerateToken()
		if err != nil {
			t.Fatal(err)
		}
		if !format.MatchString(tok.String()) {
			t.Fatalf("generated token %q has the wrong format", tok)
		}
		if parsed, err := ParseToken(tok.String()); err != nil || parsed != tok {
			t.Fatalf("a generated token does not parse back: %+v, %v", parsed, err)
		}
		if seen[tok.ID] || seen[tok.Secret] {
			t.Fatalf("token part repeated after %d tokens", len(seen)/2)
		}
		seen[tok.ID], seen[tok.Secret] = true, true
	}
}

func TestTokenSecretRoundTrip(t *testing.T) {
	tok := Token{ID: "abc123", Secret: "0123456789abcdef"}
	expires := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	baseline := offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}
	tests := []struct {
		name       string
		opts       TokenOptions
		wantPolicy offloadv1alpha1.ConsumerPolicy
	}{
		{name: "a single-use token with the zero policy reads back as baseline", opts: TokenOptions{Expires: expires}, wantPolicy: baseline},
		{name: "a reusable token reads back reusable", opts: TokenOptions{Expires: expires, Reusable: true}, wantPolicy: baseline},
		{name: "a token bound to a consumer reads back bound", opts: TokenOptions{Expires: expires, Consumer: "edge-1"}, wantPolicy: baseline},
		{
			name:       "a restricted token reads back restricted",
			opts:       TokenOptions{Expires: expires, Policy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted}},
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted},
		},
		{
			name:       "a privileged token with node placement reads back both",
			opts:       TokenOptions{Expires: expires, Policy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true}},
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true},
		},
		{
			name: "a token lending storage reads it back",
			opts: TokenOptions{Expires: expires, Policy: offloadv1alpha1.ConsumerPolicy{
				Storage: &offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("5Gi"), Claims: 3}}},
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline,
				Storage: &offloadv1alpha1.StoragePolicy{StorageClassName: "standard", Capacity: resource.MustParse("5Gi"), Claims: 3}},
		},
		{
			name:       "a token with same-name namespaces reads them back",
			opts:       TokenOptions{Expires: expires, Policy: offloadv1alpha1.ConsumerPolicy{SameNameNamespaces: true}},
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, SameNameNamespaces: true},
		},
		{
			name: "a token allowing everything reads back everything",
			opts: TokenOptions{Expires: expires, Reusable: true, Policy: offloadv1alpha1.ConsumerPolicy{
				PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true, SameNameNamespaces: true, UnlimitedContainers: true}},
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged, NodePlacement: true, SameNameNamespaces: true,
				UnlimitedContainers: true},
		},
		{
			name: "a token choosing the provider's nodes reads back its selector and tolerations",
			opts: TokenOptions{Expires: expires, Policy: offloadv1alpha1.ConsumerPolicy{
				NodeSelector: map[string]string{"pool": "tenants", "example.com/zone": "a"},
				Tolerations: []corev1.Toleration{
					{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule},
					{Key: "example.com/spot", Operator: corev1.TolerationOpExists},
				}}},
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline,
				NodeSelector: map[string]string{"pool": "tenants", "example.com/zone": "a"},
				// Read back in TolerationsString's order.
				Tolerations: []corev1.Toleration{
					{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule},
					{Key: "example.com/spot", Operator: corev1.TolerationOpExists},
				}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewTokenConfigMap("offload-system", tok, tt.opts)
			if s.Name != TokenConfigMapName(tok.ID) || s.Namespace != "offload-system" || s.Labels[TokenIDLabel] != tok.ID {
				t.Fatalf("unexpected token ConfigMap metadata: %+v", s.ObjectMeta)
			}
			if got := string(s.Data[PodSecurityKey]); got != string(tt.wantPolicy.PodSecurity) {
				t.Errorf("data %s = %q, want %q", PodSecurityKey, got, tt.wantPolicy.PodSecurity)
			}
			if v, ok := s.Data[NodePlacementKey]; ok != tt.wantPolicy.NodePlacement || (ok && string(v) != AllowedValue) {
				t.Errorf("data %s = %q (present %v), want present only when node placement is allowed", NodePlacementKey, v, ok)
			}
			if v, ok := s.Data[SameNameNamespacesKey]; ok != tt.wantPolicy.SameNameNamespaces || (ok && string(v) != AllowedValue) {
				t.Errorf("data %s = %q (present %v), want present only when same-name namespaces are allowed", SameNameNamespacesKey, v, ok)
			}
			got, err := ReadTokenConfigMap(s)
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tok.ID || !got.Expires.Equal(expires) || got.Reusable != tt.opts.Reusable || got.UsedBy != "" || !got.UsedAt.IsZero() || !got.Policy.Equal(tt.wantPolicy) || got.Consumer != tt.opts.Consumer {
				t.Errorf("round trip = %+v, want reusable=%v and policy %+v", got, tt.opts.Reusable, tt.wantPolicy)
			}
			if !got.Matches(tok) {
				t.Errorf("the stored token does not match the one it was made from")
			}
		})
	}
}

func TestReadTokenConfigMapReadsThePolicy(t *testing.T) {
	good := NewTokenConfigMap("ns", Token{ID: "abc123", Secret: "0123456789abcdef"}, TokenOptions{Expires: time.Now()})
	with := func(data map[string]string) *corev1.ConfigMap {
		s := good.DeepCopy()
		delete(s.Data, PodSecurityKey)
		delete(s.Data, NodePlacementKey)
		delete(s.Data, SameNameNamespacesKey)
		maps.Copy(s.Data, data)
		return s
	}
	tests := []struct {
		name    string
		secret  *corev1.ConfigMap
		want    offloadv1alpha1.ConsumerPolicy
		wantErr bool
	}{
		{name: "a token without the keys grants baseline, no node placement and no same-name namespaces", secret: with(nil), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}},
		{name: "an empty level grants baseline", secret: with(map[string]string{PodSecurityKey: ""}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}},
		{name: "a restricted level is read", secret: with(map[string]string{PodSecurityKey: "restricted"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted}},
		{name: "a privileged level is read", secret: with(map[string]string{PodSecurityKey: "privileged"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged}},
		{name: "node placement true is read", secret: with(map[string]string{NodePlacementKey: "true"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, NodePlacement: true}},
		{name: "node placement false grants none", secret: with(map[string]string{NodePlacementKey: "false"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}},
		{name: "an unknown level is an error naming the token", secret: with(map[string]string{PodSecurityKey: "root"}), wantErr: true},
		{name: "a level in another case is an error", secret: with(map[string]string{PodSecurityKey: "Privileged"}), wantErr: true},
		{name: "an unknown node placement is an error naming the token", secret: with(map[string]string{NodePlacementKey: "yes"}), wantErr: true},
		{name: "same-name namespaces true is read", secret: with(map[string]string{SameNameNamespacesKey: "true"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, SameNameNamespaces: true}},
		{name: "same-name namespaces false grants none", secret: with(map[string]string{SameNameNamespacesKey: "false"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}},
		{name: "same-name namespaces are read apart from node placement", secret: with(map[string]string{NodePlacementKey: "true", SameNameNamespacesKey: "true"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, NodePlacement: true, SameNameNamespaces: true}},
		{name: "an unknown same-name namespaces is an error naming the token", secret: with(map[string]string{SameNameNamespacesKey: "yes"}), wantErr: true},
		{name: "same-name namespaces in capitals is an error", secret: with(map[string]string{SameNameNamespacesKey: "True"}), wantErr: true},
		{name: "unlimited containers true is read", secret: with(map[string]string{UnlimitedContainersKey: "true"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, UnlimitedContainers: true}},
		{name: "unlimited containers false grants none", secret: with(map[string]string{UnlimitedContainersKey: "false"}), want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}},
		{name: "an unknown unlimited containers is an error naming the token", secret: with(map[string]string{UnlimitedContainersKey: "always"}), wantErr: true},
		{name: "a node selector is read", secret: with(map[string]string{NodeSelectorKey: "a=b,pool=tenants"}),
			want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, NodeSelector: map[string]string{"a": "b", "pool": "tenants"}}},
		{name: "tolerations are read", secret: with(map[string]string{TolerationsKey: "dedicated=tenants:NoSchedule,spot"}),
			want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, Tolerations: []corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "tenants", Effect: corev1.TaintEffectNoSchedule},
				{Key: "spot", Operator: corev1.TolerationOpExists}}}},
		{name: "a node selector without a value is an error naming the token", secret: with(map[string]string{NodeSelectorKey: "pool"}), wantErr: true},
		{name: "a toleration with an unknown effect is an error naming the token", secret: with(map[string]string{TolerationsKey: "a:Sometimes"}), wantErr: true},
		{name: "a toleration without a key is an error naming the token", secret: with(map[string]string{TolerationsKey: "=x:NoSchedule"}), wantErr: true},
		{name: "extended resources are read", secret: with(map[string]string{ExtendedResourcesKey: "nvidia.com/gpu,example.com/fpga"}),
			want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, ExtendedResources: []corev1.ResourceName{"example.com/fpga", "nvidia.com/gpu"}}},
		{name: "cpu is no extended resource: an error naming the token", secret: with(map[string]string{ExtendedResourcesKey: "cpu"}), wantErr: true},
		{name: "huge pages are never lent: an error naming the token", secret: with(map[string]string{ExtendedResourcesKey: "hugepages-2Mi"}), wantErr: true},
		{name: "a malformed resource name is an error naming the token", secret: with(map[string]string{ExtendedResourcesKey: "nvidia.com/g pu"}), wantErr: true},
		{name: "storage is read", secret: with(map[string]string{StorageClassKey: "fast", StorageKey: "10Gi", StorageClaimsKey: "7"}),
			want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline,
				Storage: &offloadv1alpha1.StoragePolicy{StorageClassName: "fast", Capacity: resource.MustParse("10Gi"), Claims: 7}}},
		{name: "storage without a claim count allows the default", secret: with(map[string]string{StorageClassKey: "fast", StorageKey: "1Gi"}),
			want: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline,
				Storage: &offloadv1alpha1.StoragePolicy{StorageClassName: "fast", Capacity: resource.MustParse("1Gi"), Claims: offloadv1alpha1.DefaultStorageClaims}}},
		{name: "storage without a class is an error naming the token", secret: with(map[string]string{StorageKey: "1Gi"}), wantErr: true},
		{name: "storage without a capacity is an error naming the token", secret: with(map[string]string{StorageClassKey: "fast"}), wantErr: true},
		{name: "a zero capacity is an error naming the token", secret: with(map[string]string{StorageClassKey: "fast", StorageKey: "0"}), wantErr: true},
		{name: "a malformed class is an error naming the token", secret: with(map[string]string{StorageClassKey: "Fast Disks", StorageKey: "1Gi"}), wantErr: true},
		{name: "too many claims is an error naming the token", secret: with(map[string]string{StorageClassKey: "fast", StorageKey: "1Gi", StorageClaimsKey: "100000"}), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ReadTokenConfigMap(tt.secret)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), tt.secret.Name) {
					t.Fatalf("ReadTokenConfigMap = %+v, %v; want an error naming ConfigMap %s", got.Policy, err, tt.secret.Name)
				}
				if strings.Contains(err.Error(), "0123456789abcdef") {
					t.Errorf("the error contains the secret: %v", err)
				}
				return
			}
			if err != nil || !got.Policy.Equal(tt.want) {
				t.Fatalf("ReadTokenConfigMap = %+v, %v; want policy %+v", got.Policy, err, tt.want)
			}
		})
	}
}

func TestPodSecurityLevelListNamesEveryLevel(t *testing.T) {
	if got, want := PodSecurityLevelList(), "privileged, baseline or restricted"; got != want {
		t.Errorf("PodSecurityLevelList = %q, want %q", got, want)
	}
}

func TestReadTokenConfigMapRefusesOtherConfigMaps(t *testing.T) {
	good := NewTokenConfigMap("ns", Token{ID: "abc123", Secret: "0123456789abcdef"}, TokenOptions{Expires: time.Now()})
	unlabelled := good.DeepCopy()
	delete(unlabelled.Labels, TokenIDLabel)
	noExpiry := good.DeepCopy()
	delete(noExpiry.Data, ExpirationKey)
	badUsedAt := good.DeepCopy()
	badUsedAt.Data[UsedAtKey] = "yesterday"
	badConsumer := good.DeepCopy()
	badConsumer.Data[ConsumerKey] = "Not_A_Label"
	for name, s := range map[string]*corev1.ConfigMap{"no token label": unlabelled, "no expiry": noExpiry, "a bad used-at": badUsedAt, "a bad consumer": badConsumer} {
		if _, err := ReadTokenConfigMap(s); err == nil {
			t.Errorf("a ConfigMap with %s was read as a token", name)
		} else if strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("the error for a ConfigMap with %s contains the secret: %v", name, err)
		}
	}
}

func TestMatchesNeedsTheIDAndTheSecret(t *testing.T) {
	s := NewTokenConfigMap("ns", Token{ID: "abc123", Secret: "0123456789abcdef"}, TokenOptions{Expires: time.Now()})
	st, err := ReadTokenConfigMap(s)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		tok  Token
		want bool
	}{
		{"the same token matches", Token{ID: "abc123", Secret: "0123456789abcdef"}, true},
		{"a wrong id does not match", Token{ID: "abc124", Secret: "0123456789abcdef"}, false},
		{"a wrong secret does not match", Token{ID: "abc123", Secret: "0123456789abcdeg"}, false},
		{"a secret prefix does not match", Token{ID: "abc123", Secret: "0123456789abcde"}, false},
		{"an empty token does not match", Token{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := st.Matches(tt.tok); got != tt.want {
				t.Errorf("Matches = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestExpiredAndSpent(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name           string
		tok            StoredToken
		expired, spent bool
	}{
		{name: "a fresh token is valid", tok: StoredToken{Expires: now.Add(time.Minute)}},
		{name: "a token is expired at its expiry", tok: StoredToken{Expires: now}, expired: true},
		{name: "a used single-use token is spent", tok: StoredToken{Expires: now.Add(time.Minute), UsedAt: now, UsedBy: "x"}, spent: true},
		{name: "a used reusable token is not spent", tok: StoredToken{Expires: now.Add(time.Minute), UsedAt: now, Reusable: true}},
		{name: "a used and expired token lists as used", tok: StoredToken{Expires: now.Add(-time.Minute), UsedAt: now}, expired: true, spent: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.tok.Expired(now); got != tt.expired {
				t.Errorf("Expired = %v, want %v", got, tt.expired)
			}
			if got := tt.tok.Spent(); got != tt.spent {
				t.Errorf("Spent = %v, want %v", got, tt.spent)
			}
		})
	}
}

// A token ConfigMap holds a hash of the secret, never the secret, so
// reading it does not let anyone peer.
func TestATokenConfigMapHoldsAHashOfTheSecret(t *testing.T) {
	tok := Token{ID: "abc123", Secret: "0123456789abcdef"}
	s := NewTokenConfigMap("ns", tok, TokenOptions{Expires: time.Now().Add(time.Hour)})
	for k, v := range s.Data {
		if strings.Contains(v, tok.Secret) {
			t.Errorf("data %s holds the token's secret", k)
		}
	}
	st, err := ReadTokenConfigMap(s)
	if err != nil || !st.Matches(tok) || st.Matches(Token{ID: tok.ID, Secret: "0123456789abcdeg"}) {
		t.Errorf("err %v, matches its token %v", err, st.Matches(tok))
	}
	none := s.DeepCopy()
	delete(none.Data, TokenSecretHashKey)
	if st, err := ReadTokenConfigMap(none); err == nil && st.Matches(tok) {
		t.Error("a token without the hash of its secret matches")
	}
}
