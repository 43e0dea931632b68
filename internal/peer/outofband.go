package peer

import (
	"cmp"
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	offloadv1alpha1 "github.com/kubectl-offload/kubectl-offload/api/v1alpha1"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/factory"
	"github.com/kubectl-offload/kubectl-offload/internal/cli/output"
	"github.com/kubectl-offload/kubectl-offload/internal/peering"
)

// ReasonPending is the reason of a condition the agent has yet to evaluate.
const ReasonPending = "Pending"

// rollbackTimeout bounds the wait for the agent to let go of the
// ForeignCluster of a failed first attempt.
const rollbackTimeout = time.Minute

// DefaultPeerTimeout is how long peer out-of-band waits by default.
const DefaultPeerTimeout = 2 * time.Minute

// pollInterval is how often --wait reads the ForeignCluster when the client
// cannot watch; tests shorten it.
var pollInterval = time.Second

// OutOfBandOptions are the options of `kubectl offload peer out-of-band`.
type OutOfBandOptions struct {
	genericiooptions.IOStreams

	// Args are the provider's name and the flags peer generate printed.
	Args PeerCommandArgs
	// Wait waits until the peering steps have succeeded.
	Wait bool
	// Timeout bounds the wait.
	Timeout time.Duration
	// Networking sets up the network fabric toward the provider; false for
	// clusters that already share a flat network.
	Networking bool
	// AuthTokenFile names a file that holds the peering token, "-" for the
	// standard input, so that it stays out of shell history and process
	// lists; it replaces Args.AuthToken.
	AuthTokenFile string

	extraArgs    int
	namespace    string
	client       client.Client
	pollInterval time.Duration
}

// NewOutOfBandOptions returns OutOfBandOptions with defaults.
func NewOutOfBandOptions(streams genericiooptions.IOStreams) *OutOfBandOptions {
	return &OutOfBandOptions{IOStreams: streams, Wait: true, Timeout: DefaultPeerTimeout, Networking: true, pollInterval: pollInterval}
}

// Complete takes the provider's name from args and builds the client.
func (o *OutOfBandOptions) Complete(f factory.Factory, args []string) error {
	if len(args) > 0 {
		o.Args.Name = args[0]
		o.extraArgs = len(args) - 1
	}
	if o.AuthTokenFile != "" {
		if o.Args.AuthToken != "" {
			return fmt.Errorf("give the token with --%s or --%s, not both", AuthTokenFlag, AuthTokenFileFlag)
		}
		tok, err := o.readTokenFile()
		if err != nil {
			return err
		}
		o.Args.AuthToken = tok
	}
	o.namespace = f.Namespace()
	c, err := f.Client()
	if err != nil {
		return err
	}
	o.client = c
	return nil
}

// maxTokenFile bounds what --auth-token-file reads: a token is 23 bytes.
const maxTokenFile = 4 << 10

// readTokenFile reads the token from AuthTokenFile, or the standard input
// for "-", trimmed of surrounding white space. Its errors never contain
// what it read.
func (o *OutOfBandOptions) readTokenFile() (string, error) {
	r := o.In
	name := "the standard input"
	if o.AuthTokenFile != "-" {
		f, err := os.Open(o.AuthTokenFile)
		if err != nil {
			return "", fmt.Errorf("reading --%s: %w", AuthTokenFileFlag, err)
		}
		defer func() { _ = f.Close() }()
		r, name = f, o.AuthTokenFile
	}
	if r == nil {
		return "", fmt.Errorf("reading --%s: no standard input", AuthTokenFileFlag)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("reading the peering token from %s: %w", name, err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("%s holds more than a peering token: give a file with only the token, id.secret", name)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s holds no peering token: give a file with the token, id.secret, from kubectl offload peer generate", name)
	}
	return tok, nil
}

// Validate checks every argument offline. Its errors never contain the token.
func (o *OutOfBandOptions) Validate() error {
	if o.extraArgs > 0 {
		return errors.New("only one NAME is expected: kubectl offload peer out-of-band NAME --auth-url URL --cluster-id ID --auth-token TOKEN --ca-cert-hash HASH")
	}
	if err := ValidatePeerArgs(o.Args); err != nil {
		return err
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be more than 0, got %s", o.Timeout)
	}
	return nil
}

// Run stores the token and the ForeignCluster, then waits for the peering
// steps when Wait is set.
func (o *OutOfBandOptions) Run(ctx context.Context) error {
	if err := o.checkInstalled(ctx); err != nil {
		return err
	}
	var fc offloadv1alpha1.ForeignCluster
	err := o.client.Get(ctx, types.NamespacedName{Name: o.Args.Name}, &fc)
	switch {
	case apierrors.IsNotFound(err):
		fc = offloadv1alpha1.ForeignCluster{}
	case err != nil:
		return fmt.Errorf("reading ForeignCluster %s: %w", o.Args.Name, err)
	case fc.Spec.ClusterID != "" && fc.Spec.ClusterID != o.Args.ClusterID:
		return fmt.Errorf("ForeignCluster %s already stands for cluster ID %s, not %s: run kubectl offload unpeer %s first, or pick another NAME",
			o.Args.Name, fc.Spec.ClusterID, o.Args.ClusterID, o.Args.Name)
	}
	peered, err := o.exists(ctx, peering.PeerKubeconfigSecretName(o.Args.Name))
	if err != nil {
		return err
	}
	createdFC := fc.Name == ""
	tokenChanged := false
	if !peered {
		if tokenChanged, err = o.applyTokenSecret(ctx); err != nil {
			return err
		}
	}
	if err := o.applyForeignCluster(ctx, &fc, tokenChanged); err != nil {
		return err
	}
	if !peered {
		if err := o.ownTokenSecret(ctx, &fc); err != nil {
			return err
		}
	}
	if peered {
		fmt.Fprintf(o.Out, "foreigncluster.offload.io/%s configured (already authenticated; the token was not needed)\n", o.Args.Name)
	} else {
		fmt.Fprintf(o.Out, "foreigncluster.offload.io/%s configured\n", o.Args.Name)
	}
	if !o.Wait {
		return nil
	}
	err = o.wait(ctx)
	if err != nil && createdFC && !peered {
		// A first attempt that failed leaves nothing behind: run the
		// command again once the cause is fixed.
		if rerr := o.rollback(context.WithoutCancel(ctx)); rerr != nil {
			return errors.Join(err, rerr)
		}
		fmt.Fprintf(o.ErrOut, "removed ForeignCluster %s and its token Secret: nothing is left of this attempt\n", o.Args.Name)
	}
	return err
}

// rollback deletes what a failed first attempt created.
func (o *OutOfBandOptions) rollback(ctx context.Context) error {
	fc := &offloadv1alpha1.ForeignCluster{ObjectMeta: metav1.ObjectMeta{Name: o.Args.Name}}
	if err := o.client.Delete(ctx, fc); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing ForeignCluster %s: %w", o.Args.Name, err)
	}
	// The agent's finalizers let it go once it released what it holds: the
	// tenant on the provider, if the token was spent.
	ctx, cancel := context.WithTimeout(ctx, rollbackTimeout)
	defer cancel()
	if err := waitForeignCluster(ctx, o.client, o.Args.Name, o.pollInterval, func(fc *offloadv1alpha1.ForeignCluster) (bool, error) {
		return fc == nil, nil
	}); err != nil {
		return fmt.Errorf("ForeignCluster %s is still being removed after %s: kubectl offload unpeer %s finishes the job", o.Args.Name, rollbackTimeout, o.Args.Name)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: peering.PeerTokenSecretName(o.Args.Name), Namespace: o.namespace}}
	if err := o.client.Delete(ctx, secret); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("removing Secret %s: %w", secret.Name, err)
	}
	return nil
}

// checkInstalled reads this cluster's identity and refuses to peer with itself.
func (o *OutOfBandOptions) checkInstalled(ctx context.Context) error {
	id, err := peering.ReadIdentity(ctx, o.client, o.namespace)
	if apierrors.IsNotFound(err) {
		return fmt.Errorf("kubectl-offload is not installed in namespace %s (no ConfigMap %s): run kubectl offload install, or pass -n with its namespace", o.namespace, offloadv1alpha1.IdentityConfigMap)
	}
	if err != nil {
		return err
	}
	if id.ID == o.Args.ClusterID {
		return fmt.Errorf("invalid --%s: it is this cluster's own ID; run kubectl offload peer out-of-band on the consumer, with the command peer generate printed on the provider", ClusterIDFlag)
	}
	return nil
}

func (o *OutOfBandOptions) exists(ctx context.Context, secret string) (bool, error) {
	var s corev1.Secret
	err := o.client.Get(ctx, types.NamespacedName{Namespace: o.namespace, Name: secret}, &s)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading Secret %s: %w", secret, err)
	}
	return true, nil
}

// ownTokenSecret makes fc an owner of the token Secret, so that the
// Secret goes with the peering even when the agent does not remove it
// (unpeer --force while the agent is down).
func (o *OutOfBandOptions) ownTokenSecret(ctx context.Context, fc *offloadv1alpha1.ForeignCluster) error {
	var s corev1.Secret
	err := o.client.Get(ctx, types.NamespacedName{Namespace: o.namespace, Name: peering.PeerTokenSecretName(fc.Name)}, &s)
	if apierrors.IsNotFound(err) {
		return nil // spent and removed by the agent already
	}
	if err != nil {
		return fmt.Errorf("reading the token Secret %s: %w", peering.PeerTokenSecretName(fc.Name), err)
	}
	before := s.DeepCopy()
	if err := controllerutil.SetOwnerReference(fc, &s, o.client.Scheme()); err != nil {
		return err
	}
	if equality.Semantic.DeepEqual(before.OwnerReferences, s.OwnerReferences) {
		return nil
	}
	patch := client.MergeFromWithOptions(before, client.MergeFromWithOptimisticLock{})
	if err := o.client.Patch(ctx, &s, patch); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("making ForeignCluster %s the owner of the token Secret %s: %w", fc.Name, s.Name, err)
	}
	return nil
}

// applyTokenSecret creates or updates the token Secret, and tells whether
// its token changed.
func (o *OutOfBandOptions) applyTokenSecret(ctx context.Context) (bool, error) {
	name := peering.PeerTokenSecretName(o.Args.Name)
	want := peering.NewPeerTokenSecret(o.namespace, o.Args.Name, o.Args.AuthToken)
	var got corev1.Secret
	err := o.client.Get(ctx, client.ObjectKeyFromObject(want), &got)
	if apierrors.IsNotFound(err) {
		if err := o.client.Create(ctx, want); err != nil {
			return false, fmt.Errorf("creating the token Secret %s: %w", name, err)
		}
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the token Secret %s: %w", name, err)
	}
	if got.Type != peering.PeerAuthTokenSecretType {
		return false, fmt.Errorf("secret %s exists but is not a peering token (type %s): delete it, then run this again", name, got.Type)
	}
	sameToken := subtle.ConstantTimeCompare([]byte(peering.PeerToken(&got)), []byte(o.Args.AuthToken)) == 1
	if sameToken && got.Labels[peering.ForeignClusterLabel] == o.Args.Name {
		return false, nil
	}
	changed := !sameToken
	got.Data = want.Data
	if got.Labels == nil {
		got.Labels = map[string]string{}
	}
	got.Labels[peering.ForeignClusterLabel] = o.Args.Name
	if err := o.client.Update(ctx, &got); err != nil {
		return false, fmt.Errorf("updating the token Secret %s: %w", name, err)
	}
	return changed, nil
}

// applyForeignCluster creates or updates fc, the ForeignCluster as read
// (empty when it does not exist). When the token changed, it records the
// token's ID in an annotation: the agent answers that token, and --wait
// trusts the conditions only once the agent says it acted on it. The CLI
// never writes the status.
func (o *OutOfBandOptions) applyForeignCluster(ctx context.Context, fc *offloadv1alpha1.ForeignCluster, tokenChanged bool) error {
	create := fc.Name == ""
	before := fc.DeepCopy()
	fc.Name = o.Args.Name
	fc.Spec.ClusterID = o.Args.ClusterID
	fc.Spec.ClusterName = o.Args.Name
	fc.Spec.AuthURL = o.Args.AuthURL
	fc.Spec.CACertHash = o.Args.CACertHash
	fc.Spec.OutgoingPeering.Enabled = true
	fc.Spec.Networking.Disabled = !o.Networking
	// A ForeignCluster that recorded NAME as a consumer of this cluster now
	// stands for both directions.
	delete(fc.Labels, offloadv1alpha1.LabelIncomingOnly)
	if tokenChanged {
		tok, _ := peering.ParseToken(o.Args.AuthToken) // validated
		metav1.SetMetaDataAnnotation(&fc.ObjectMeta, peering.TokenIDAnnotation, tok.ID)
	}
	if create {
		if err := o.client.Create(ctx, fc); err != nil {
			return fmt.Errorf("creating ForeignCluster %s: %w", fc.Name, err)
		}
	} else if !tokenChanged && equality.Semantic.DeepEqual(before, fc) {
		return nil
	} else if err := o.client.Update(ctx, fc); err != nil {
		return fmt.Errorf("updating ForeignCluster %s: %w", fc.Name, err)
	}
	return nil
}

// waitStep is a step of the peering that --wait reports: it succeeds when
// the ForeignCluster's condition of that type is True.
type waitStep struct {
	name      string
	condition string
}

// waitSteps are the steps --wait reports, in order; <name> stands for the
// provider's name.
var waitSteps = []waitStep{
	{name: "Authenticated with the provider", condition: offloadv1alpha1.ConditionAuthenticated},
	{name: "OutgoingPeering established", condition: offloadv1alpha1.ConditionOutgoingPeering},
	{name: "Virtual node offload-<name> Ready", condition: offloadv1alpha1.ConditionVirtualNodeReady},
}

// ConditionFailedError is a peering step whose condition is False. Its
// message is the agent's, which says what to do next.
type ConditionFailedError struct {
	Condition string
	Reason    string
	Message   string
}

// Error returns the agent's message.
func (e *ConditionFailedError) Error() string {
	if e.Message == "" {
		return e.Reason
	}
	return e.Message
}

// wait polls the ForeignCluster until every step succeeded, one failed or
// the timeout passed.
func (o *OutOfBandOptions) wait(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	steps := output.NewSteps(o.ErrOut)
	for _, s := range waitSteps {
		s.name = strings.ReplaceAll(s.name, "<name>", o.Args.Name)
		err := steps.Run(s.name, func() error { return o.waitCondition(ctx, s.condition) })
		var failed *ConditionFailedError
		switch {
		case errors.As(err, &failed):
			return fmt.Errorf("peering with %s failed at step %q: %w", o.Args.Name, s.name, err)
		case err != nil:
			return fmt.Errorf("peering with %s: step %q %w; see kubectl get foreigncluster %s -o yaml and the offload-controller-manager logs", o.Args.Name, s.name, err, o.Args.Name)
		}
	}
	return nil
}

// waitCondition waits until the condition is True, and returns a
// *ConditionFailedError when it is False.
func (o *OutOfBandOptions) waitCondition(ctx context.Context, condition string) error {
	var failed error
	pending := "" // what the agent last said while pending
	err := waitForeignCluster(ctx, o.client, o.Args.Name, o.pollInterval, func(fc *offloadv1alpha1.ForeignCluster) (bool, error) {
		if fc == nil {
			return false, nil // not in the cache yet
		}
		// An agent of an earlier release records the token it acted on in
		// an annotation.
		observed := cmp.Or(fc.Status.ObservedTokenID, fc.Annotations[peering.ObservedTokenIDAnnotation])
		if id := fc.Annotations[peering.TokenIDAnnotation]; id != "" && observed != id {
			pending = "the agent has not acted on the new token yet"
			return false, nil // the conditions may be about an earlier token
		}
		c := meta.FindStatusCondition(fc.Status.Conditions, condition)
		switch {
		case c == nil:
			return false, nil
		case c.Status == metav1.ConditionUnknown:
			pending = c.Message
			return false, nil
		case c.Status == metav1.ConditionTrue:
			return true, nil
		}
		failed = &ConditionFailedError{Condition: condition, Reason: c.Reason, Message: c.Message}
		return true, nil
	})
	if failed != nil {
		return failed
	}
	if err != nil && pending != "" {
		return fmt.Errorf("is still pending after %s (--timeout): %s", o.Timeout, pending)
	}
	if err != nil {
		return fmt.Errorf("is still pending after %s (--timeout)", o.Timeout)
	}
	return nil
}
