package peer

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/fake"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/helmclient"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

const testNS = "offload-system"

// fakeHelm serves the release; generate reads nothing else.
type fakeHelm struct {
	helmclient.Client
	rel *helmclient.Release
}

func (h fakeHelm) Release(string) (*helmclient.Release, error) { return h.rel, nil }

// testCA returns a PEM CA certificate and its kubeadm-style hash.
func testCA(t *testing.T) ([]byte, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "offload test CA"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), "sha256:" + hex.EncodeToString(sum[:])
}

func identityCM() *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: testNS},
		Data: map[string]string{"clusterID": testID, "clusterName": "provider"}}
}

func caSecret(certPEM []byte) *corev1.Secret {
	return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.AuthCASecret, Namespace: testNS}, Data: map[string][]byte{offloadv1alpha1.AuthCACertKey: certPEM}}
}

func newGenerate(kube *fake.Clientset) (*GenerateOptions, *bytes.Buffer, *bytes.Buffer) {
	streams, _, out, errOut := genericiooptions.NewTestIOStreams()
	o := NewGenerateOptions(streams)
	o.namespace, o.kube = testNS, kube
	o.helm = fakeHelm{rel: &helmclient.Release{Name: offloadv1alpha1.ReleaseName, Values: map[string]any{"auth": map[string]any{"url": testURL}}}}
	return o, out, errOut
}

func storedTokens(t *testing.T, kube *fake.Clientset) []corev1.ConfigMap {
	t.Helper()
	list, err := kube.CoreV1().ConfigMaps(testNS).List(context.Background(), metav1.ListOptions{LabelSelector: peering.TokenIDLabel})
	if err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// onlyToken reads the one token ConfigMap generate created; it fails the test
// when there is not exactly one.
func onlyToken(t *testing.T, kube *fake.Clientset) (peering.StoredToken, error) {
	t.Helper()
	stored := storedTokens(t, kube)
	if len(stored) != 1 {
		t.Fatalf("%d token ConfigMaps, want 1", len(stored))
	}
	return peering.ReadTokenConfigMap(&stored[0])
}

func TestGenerateCreatesNothingUntilTheClusterIsReady(t *testing.T) {
	certPEM, _ := testCA(t)
	tests := []struct {
		name    string
		objects []runtime.Object
	}{
		{name: "not installed", objects: nil},
		{name: "installed, the auth CA not created yet", objects: []runtime.Object{identityCM()}},
		{name: "a CA Secret without a certificate", objects: []runtime.Object{identityCM(), caSecret(nil)}},
		{name: "no cluster name", objects: []runtime.Object{&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: offloadv1alpha1.IdentityConfigMap, Namespace: testNS}, Data: map[string]string{"clusterID": testID}}, caSecret(certPEM)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			kube := fake.NewClientset(tt.objects...)
			o, out, _ := newGenerate(kube)
			if err := o.Run(context.Background()); err == nil {
				t.Fatal("generate succeeded")
			}
			if n := len(storedTokens(t, kube)); n != 0 || out.Len() != 0 {
				t.Errorf("generate left %d tokens and printed %q", n, out.String())
			}
		})
	}
}

func TestGeneratePrintsTheCommandForANewToken(t *testing.T) {
	certPEM, hash := testCA(t)
	kube := fake.NewClientset(identityCM(), caSecret(certPEM))
	o, out, errOut := newGenerate(kube)
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	o.now = func() time.Time { return now }
	if err := o.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	args := shellArgs(t, out.String())
	want := PeerCommandArgs{Name: "provider", AuthURL: testURL, ClusterID: testID, AuthToken: args.AuthToken, CACertHash: hash}
	if args != want || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("generate printed %q, want one line with %+v", out, want)
	}
	tok, _ := peering.ParseToken(args.AuthToken)
	if strings.Contains(errOut.String(), tok.Secret) || !strings.Contains(errOut.String(), tok.ID) {
		t.Errorf("the note names the token by its ID only: %q", errOut)
	}
	if !strings.Contains(errOut.String(), "Pod Security baseline") || !strings.Contains(errOut.String(), "always named by this cluster") || strings.Contains(errOut.String(), "root") {
		t.Errorf("the note does not name the default policy, or warns about it: %q", errOut)
	}
	tokens := storedTokens(t, kube)
	if len(tokens) != 1 || tokens[0].Name != peering.TokenConfigMapName(tok.ID) ||
		tokens[0].Data[peering.UsageKey] != peering.UsageSingle || tokens[0].Data[peering.ExpirationKey] != "2030-01-01T13:00:00Z" {
		t.Errorf("tokens = %+v, want one single-use ConfigMap for %s expiring in an hour", tokens, tok.ID)
	}
	stored, err := peering.ReadTokenConfigMap(&tokens[0])
	if want := (offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline}); err != nil || !stored.Policy.Equal(want) {
		t.Errorf("the token grants %+v (%v), want %+v", stored.Policy, err, want)
	}
}

func TestGenerateStoresAndShowsThePolicy(t *testing.T) {
	tests := []struct {
		name        string
		podSecurity string
		placement   bool
		sameName    bool
		unlimited   bool
		extended    []string
		output      output.Format
		wantPolicy  offloadv1alpha1.ConsumerPolicy
		wantNote    []string
		wantWarning bool
	}{
		{
			name: "restricted is stored and shown", podSecurity: "restricted", output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted},
			wantNote: []string{"Pod Security restricted", "only by operating system and architecture", "always named by this cluster (--allow-same-name-namespaces",
				"each container no more than is lent, which is its limit when it sets none (--allow-unlimited-containers"},
		},
		{
			name: "unlimited containers are stored and shown", podSecurity: "baseline", unlimited: true, output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, UnlimitedContainers: true},
			wantNote:   []string{"idle capacity beyond what is lent: a container that sets no limit gets none (--allow-unlimited-containers)"},
		},
		{
			name: "same-name namespaces are stored and shown", podSecurity: "baseline", sameName: true, output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, SameNameNamespaces: true},
			wantNote:   []string{"Pod Security baseline", "only by operating system and architecture", "may have the names of the consumer's own namespaces"},
		},
		{
			name: "same-name namespaces are in the JSON policy", podSecurity: "restricted", sameName: true, output: output.JSON,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityRestricted, SameNameNamespaces: true},
		},
		{
			name: "node placement is stored and shown", podSecurity: "baseline", placement: true, output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, NodePlacement: true},
			wantNote:   []string{"Pod Security baseline", "freely: by nodeName"},
		},
		{
			name: "privileged is stored, shown and warned about", podSecurity: "privileged", output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged},
			wantNote:   []string{"Pod Security privileged"}, wantWarning: true,
		},
		{
			name: "lent extended resources are stored and shown", podSecurity: "baseline", extended: []string{"nvidia.com/gpu", "example.com/fpga", "nvidia.com/gpu"}, output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline, ExtendedResources: []corev1.ResourceName{"example.com/fpga", "nvidia.com/gpu"}},
			wantNote:   []string{"may use a share of example.com/fpga,nvidia.com/gpu (--extended-resource)"},
		},
		{
			name: "no extended resource is lent by default", podSecurity: "baseline", output: output.Table,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityBaseline},
			wantNote:   []string{"may use no extended resource of this cluster's nodes"},
		},
		{
			name: "privileged is warned about with -o json too", podSecurity: "privileged", output: output.JSON,
			wantPolicy: offloadv1alpha1.ConsumerPolicy{PodSecurity: offloadv1alpha1.PodSecurityPrivileged}, wantWarning: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, _ := testCA(t)
			kube := fake.NewClientset(identityCM(), caSecret(certPEM))
			o, out, errOut := newGenerate(kube)
			o.PodSecurity, o.AllowNodePlacement, o.AllowSameNameNamespaces, o.Output = tt.podSecurity, tt.placement, tt.sameName, tt.output
			o.ExtendedResources, o.AllowUnlimitedContainers = tt.extended, tt.unlimited
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			if err := o.Run(context.Background()); err != nil {
				t.Fatal(err)
			}
			stored, err := onlyToken(t, kube)
			if err != nil || !stored.Policy.Equal(tt.wantPolicy) {
				t.Errorf("the token Secret grants %+v (%v), want %+v", stored.Policy, err, tt.wantPolicy)
			}
			for _, want := range tt.wantNote {
				if !strings.Contains(errOut.String(), want) {
					t.Errorf("stderr %q does not say %q", errOut, want)
				}
			}
			if got := strings.Contains(errOut.String(), "can become root on this cluster's nodes"); got != tt.wantWarning {
				t.Errorf("stderr %q warns about root: %v, want %v", errOut, got, tt.wantWarning)
			}
			switch tt.output {
			case output.JSON:
				var pc PeerCommand
				if err := json.Unmarshal(out.Bytes(), &pc); err != nil || !pc.Policy.Equal(tt.wantPolicy) {
					t.Errorf("the JSON output carries policy %+v (%v), want %+v", pc.Policy, err, tt.wantPolicy)
				}
				if got := strings.Contains(out.String(), `"sameNameNamespaces"`); got != tt.wantPolicy.SameNameNamespaces {
					t.Errorf("the JSON output names sameNameNamespaces: %v, want %v: %s", got, tt.wantPolicy.SameNameNamespaces, out)
				}
			default:
				if args := shellArgs(t, out.String()); args.AuthToken == "" || strings.Count(out.String(), "\n") != 1 {
					t.Errorf("stdout is not the one pasteable command line: %q", out)
				}
			}
		})
	}
}

func TestGenerateValidatesItsFlags(t *testing.T) {
	tests := []struct {
		name   string
		modify func(*GenerateOptions)
		ok     bool
	}{
		{name: "the defaults are valid", modify: func(*GenerateOptions) {}, ok: true},
		{name: "a day is the longest ttl", modify: func(o *GenerateOptions) { o.TTL = MaxTokenTTL }, ok: true},
		{name: "a zero ttl is refused", modify: func(o *GenerateOptions) { o.TTL = 0 }},
		{name: "a negative ttl is refused", modify: func(o *GenerateOptions) { o.TTL = -time.Minute }},
		{name: "a ttl over a day is refused", modify: func(o *GenerateOptions) { o.TTL = MaxTokenTTL + time.Second }},
		{name: "an http auth URL is refused", modify: func(o *GenerateOptions) { o.AuthURL = "http://h:1" }},
		{name: "an unknown output is refused", modify: func(o *GenerateOptions) { o.Output = "xml" }},
		{name: "restricted is a valid pod security", modify: func(o *GenerateOptions) { o.PodSecurity = "restricted" }, ok: true},
		{name: "privileged with node placement is valid", modify: func(o *GenerateOptions) { o.PodSecurity, o.AllowNodePlacement = "privileged", true }, ok: true},
		{name: "same-name namespaces are valid with any policy", modify: func(o *GenerateOptions) {
			o.PodSecurity, o.AllowNodePlacement, o.AllowSameNameNamespaces = "restricted", true, true
		}, ok: true},
		{name: "an unknown pod security is refused", modify: func(o *GenerateOptions) { o.PodSecurity = "root" }},
		{name: "a pod security in capitals is refused", modify: func(o *GenerateOptions) { o.PodSecurity = "Baseline" }},
		{name: "extended resources are valid", modify: func(o *GenerateOptions) { o.ExtendedResources = []string{"nvidia.com/gpu", "example.com/fpga"} }, ok: true},
		{name: "cpu is not an extended resource", modify: func(o *GenerateOptions) { o.ExtendedResources = []string{"cpu"} }},
		{name: "a kubernetes.io resource is not an extended resource", modify: func(o *GenerateOptions) { o.ExtendedResources = []string{"kubernetes.io/batch-cpu"} }},
		{name: "huge pages are not lent", modify: func(o *GenerateOptions) { o.ExtendedResources = []string{"hugepages-1Gi"} }},
		{name: "a malformed extended resource is refused", modify: func(o *GenerateOptions) { o.ExtendedResources = []string{"nvidia.com/"} }},
		{name: "seventeen extended resources are too many", modify: func(o *GenerateOptions) {
			for i := range 17 {
				o.ExtendedResources = append(o.ExtendedResources, fmt.Sprintf("example.com/d%d", i))
			}
		}},
		{name: "storage is valid", modify: func(o *GenerateOptions) { o.Storage, o.StorageClass, o.StorageClaims = "10Gi", "fast", 5 }, ok: true},
		{name: "storage on the default class is valid", modify: func(o *GenerateOptions) { o.Storage = "1Gi" }, ok: true},
		{name: "a storage class without storage is refused", modify: func(o *GenerateOptions) { o.StorageClass = "fast" }},
		{name: "a claim count without storage is refused", modify: func(o *GenerateOptions) { o.StorageClaims = 3 }},
		{name: "storage that is no quantity is refused", modify: func(o *GenerateOptions) { o.Storage = "ten gigs" }},
		{name: "no storage at all is refused", modify: func(o *GenerateOptions) { o.Storage = "0" }},
		{name: "a negative claim count is refused", modify: func(o *GenerateOptions) { o.Storage, o.StorageClaims = "1Gi", -1 }},
		{name: "a malformed class is refused", modify: func(o *GenerateOptions) { o.Storage, o.StorageClass = "1Gi", "Fast_Disks" }},
		{name: "a consumer name is valid", modify: func(o *GenerateOptions) { o.Consumer = "edge-1" }, ok: true},
		{name: "a consumer name that is no DNS label is refused", modify: func(o *GenerateOptions) { o.Consumer = "Edge_1" }},
		{name: "a consumer name too long for its tenant namespace is refused", modify: func(o *GenerateOptions) { o.Consumer = strings.Repeat("a", 60) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := NewGenerateOptions(genericiooptions.NewTestIOStreamsDiscard())
			tt.modify(o)
			if err := o.Validate(); (err == nil) != tt.ok {
				t.Errorf("Validate = %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestGenerateFlagsDefaultToBaselineWithoutNodePlacementOrSameNameNamespaces(t *testing.T) {
	cmd := newCmdGenerate("generate", nil, genericiooptions.NewTestIOStreamsDiscard())
	for flag, want := range map[string]string{"pod-security": "baseline", "allow-node-placement": "false", "allow-same-name-namespaces": "false",
		"allow-unlimited-containers": "false"} {
		if f := cmd.Flags().Lookup(flag); f == nil || f.DefValue != want {
			t.Errorf("flag --%s: %+v, want the default %s", flag, f, want)
		}
	}
}

func TestAnUnknownPodSecurityErrorListsTheLevels(t *testing.T) {
	o := NewGenerateOptions(genericiooptions.NewTestIOStreamsDiscard())
	o.PodSecurity = "root"
	err := o.Validate()
	if err == nil {
		t.Fatal("Validate accepted --pod-security root")
	}
	for _, want := range []string{"--pod-security", `"root"`, "restricted", "baseline", "privileged"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not say %s", err, want)
		}
	}
}

func TestTokensListAndRevoke(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 0, 0, time.UTC)
	valid := peering.NewTokenConfigMap(testNS, peering.Token{ID: "aaaaaa", Secret: "secretsecret0001"}, peering.TokenOptions{Expires: now.Add(time.Hour), Consumer: "edge-1"})
	expired := peering.NewTokenConfigMap(testNS, peering.Token{ID: "bbbbbb", Secret: "secretsecret0002"}, peering.TokenOptions{Expires: now.Add(-time.Hour), Reusable: true})
	used := peering.NewTokenConfigMap(testNS, peering.Token{ID: "cccccc", Secret: "secretsecret0003"}, peering.TokenOptions{Expires: now.Add(2 * time.Hour)})
	used.Data[peering.UsedByKey], used.Data[peering.UsedAtKey] = testID, now.Format(time.RFC3339)
	kube := fake.NewClientset(valid, expired, used)

	streams, _, out, _ := genericiooptions.NewTestIOStreams()
	l := NewTokensListOptions(streams)
	l.namespace, l.kube, l.now = testNS, kube, func() time.Time { return now }
	if err := l.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := "ID       EXPIRES                USAGE        CONSUMER   STATUS    USED BY\n" +
		"bbbbbb   2030-01-01T11:00:00Z   reusable     -          expired   -\n" +
		"aaaaaa   2030-01-01T13:00:00Z   single-use   edge-1     valid     -\n" +
		"cccccc   2030-01-01T14:00:00Z   single-use   -          used      " + testID + "\n"
	if out.String() != want {
		t.Errorf("tokens list =\n%s\nwant\n%s", out, want)
	}
	if strings.Contains(out.String(), "secretsecret") {
		t.Errorf("tokens list shows a secret")
	}

	streams, _, out, _ = genericiooptions.NewTestIOStreams()
	r := NewTokensRevokeOptions(streams)
	r.namespace, r.kube, r.IDs = testNS, kube, []string{"aaaaaa", "zzzzzz"}
	if err := r.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "zzzzzz") {
		t.Errorf("revoking an unknown ID: %v, want an error naming it", err)
	}
	if n := len(storedTokens(t, kube)); n != 2 || out.String() != "token aaaaaa revoked\n" {
		t.Errorf("after revoke: %d tokens, output %q; want 2 and aaaaaa revoked", n, out)
	}
	r.IgnoreNotFound, r.IDs = true, []string{"aaaaaa"}
	if err := r.Run(context.Background()); err != nil {
		t.Errorf("revoking again with --ignore-not-found: %v", err)
	}
	for _, bad := range []string{"aaaaaa.secretsecret0001", "AAAAAA", "aaaaa"} {
		r.IDs = []string{bad}
		if err := r.Validate(); err == nil || strings.Contains(err.Error(), bad) {
			t.Errorf("Validate(%q) = %v, want an error that does not echo it", bad, err)
		}
	}
}

func TestTokensListShowsExpiredAndSpentTokens(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	tests := []struct {
		name             string
		tok              peering.StoredToken
		wantListedStatus string
	}{
		{name: "a fresh token is valid", tok: peering.StoredToken{Expires: now.Add(time.Minute)}, wantListedStatus: TokenValid},
		{name: "a token is expired at its expiry", tok: peering.StoredToken{Expires: now}, wantListedStatus: TokenExpired},
		{name: "a used single-use token is spent", tok: peering.StoredToken{Expires: now.Add(time.Minute), UsedAt: now, UsedBy: "x"}, wantListedStatus: TokenUsed},
		{name: "a used reusable token is not spent", tok: peering.StoredToken{Expires: now.Add(time.Minute), UsedAt: now, Reusable: true}, wantListedStatus: TokenValid},
		{name: "a used and expired token lists as used", tok: peering.StoredToken{Expires: now.Add(-time.Minute), UsedAt: now}, wantListedStatus: TokenUsed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tokenInfo(tt.tok, now).Status; got != tt.wantListedStatus {
				t.Errorf("listed status = %q, want %q", got, tt.wantListedStatus)
			}
		})
	}
}

func TestGenerateBindsTheTokenToAConsumer(t *testing.T) {
	certPEM, _ := testCA(t)
	kube := fake.NewClientset(identityCM(), caSecret(certPEM))
	o, _, errOut := newGenerate(kube)
	o.Consumer = "edge-1"
	if err := o.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	stored, err := onlyToken(t, kube)
	if err != nil || stored.Consumer != "edge-1" {
		t.Errorf("the token Secret is bound to %q (%v), want edge-1", stored.Consumer, err)
	}
	if !strings.Contains(errOut.String(), "by consumer edge-1 only") {
		t.Errorf("the note does not say whom the token is for: %q", errOut)
	}
}

func TestGenerateLendsStorageOfTheClassItNames(t *testing.T) {
	class := func(name string, created time.Time, isDefault bool) *storagev1.StorageClass {
		sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.NewTime(created)}, Provisioner: "example.com/disk"}
		if isDefault {
			sc.Annotations = map[string]string{defaultStorageClassAnnotation: "true"}
		}
		return sc
	}
	day := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	classes := []runtime.Object{class("old-default", day, true), class("new-default", day.Add(time.Hour), true), class("fast", day, false)}
	tests := []struct {
		name, storage, class string
		claims               int
		classes              []runtime.Object
		want                 *offloadv1alpha1.StoragePolicy
		wantErr              string
	}{
		{name: "the named class", storage: "10Gi", class: "fast", claims: 4, classes: classes,
			want: &offloadv1alpha1.StoragePolicy{StorageClassName: "fast", Capacity: resource.MustParse("10Gi"), Claims: 4}},
		{name: "the newest default class, as the API server picks it", storage: "1Gi", classes: classes,
			want: &offloadv1alpha1.StoragePolicy{StorageClassName: "new-default", Capacity: resource.MustParse("1Gi"), Claims: offloadv1alpha1.DefaultStorageClaims}},
		{name: "a class that does not exist", storage: "1Gi", class: "slow", classes: classes, wantErr: "--storage-class slow: this cluster has no such StorageClass"},
		{name: "no default class", storage: "1Gi", classes: []runtime.Object{class("fast", day, false)}, wantErr: "name the class to lend with --storage-class"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			certPEM, _ := testCA(t)
			kube := fake.NewClientset(append([]runtime.Object{identityCM(), caSecret(certPEM)}, tt.classes...)...)
			o, out, errOut := newGenerate(kube)
			o.Storage, o.StorageClass, o.StorageClaims = tt.storage, tt.class, tt.claims
			if err := o.Validate(); err != nil {
				t.Fatal(err)
			}
			err := o.Run(context.Background())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Run = %v, want an error saying %q", err, tt.wantErr)
				}
				if n := len(storedTokens(t, kube)); n != 0 || out.Len() != 0 {
					t.Errorf("a refused generate left %d tokens and printed %q", n, out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			stored, err := onlyToken(t, kube)
			if err != nil || !stored.Policy.Storage.Equal(tt.want) {
				t.Errorf("the token lends %+v (%v), want %+v", stored.Policy.Storage, err, tt.want)
			}
			if note := peering.StorageString(tt.want); !strings.Contains(errOut.String(), note) {
				t.Errorf("stderr %q does not say %q", errOut, note)
			}
		})
	}
}
