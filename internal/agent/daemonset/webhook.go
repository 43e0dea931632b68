package daemonset

import (
	"context"
	"encoding/json"
	"fmt"

	"gomodules.xyz/jsonpatch/v2"
	admissionv1 "k8s.io/api/admission/v1"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// Path is where the controller-manager's webhook server serves the
// DaemonSet mutating webhook (webhook daemonsets.offload.io of the chart's
// MutatingWebhookConfiguration offload-webhook).
const Path = "/mutate-daemonsets"

// FailureWarning starts the warning of a DaemonSet admitted unchanged
// because the webhook failed; the controller changes it moments later.
const FailureWarning = "offload DaemonSet webhook: the DaemonSet was admitted without the affinity that keeps it off virtual nodes"

// Mutator is the admission handler of the DaemonSet webhook: on creation
// and update it answers with the JSON patch Reconcile implies. Like the
// pod webhook, it allows every request, also when it fails (the
// controller catches up), so the agent never blocks a DaemonSet.
type Mutator struct {
	// Client reads nodes and ForeignClusters, normally from the manager's cache.
	Client client.Reader
	// Logger receives the webhook's logs.
	Logger klog.Logger

	decoder admission.Decoder
}

// Handle implements admission.Handler.
func (m *Mutator) Handle(ctx context.Context, req admission.Request) admission.Response {
	if (req.Operation != admissionv1.Create && req.Operation != admissionv1.Update) ||
		req.Resource.Group != appsv1.GroupName || req.Resource.Resource != "daemonsets" || req.SubResource != "" {
		return admission.Allowed("only DaemonSet creations and updates are mutated")
	}
	log := m.Logger.WithValues("daemonSet", klog.KRef(req.Namespace, req.Name))
	if m.decoder == nil {
		return m.failed(log, fmt.Errorf("the DaemonSet mutator has no decoder: register it with Setup"))
	}
	ds := &appsv1.DaemonSet{}
	if err := m.decoder.Decode(req, ds); err != nil {
		return m.failed(log, fmt.Errorf("decoding the DaemonSet: %w", err))
	}
	expected, err := VirtualNodesExpected(ctx, m.Client)
	if err != nil {
		return m.failed(log, err)
	}
	before := ds.DeepCopy()
	if !Reconcile(ds, expected) {
		return admission.Allowed("the DaemonSet needs no change")
	}
	ops, err := changes(before, ds)
	if err != nil {
		return m.failed(log, err)
	}
	log.V(2).Info("Mutated a DaemonSet", "excluded", expected && ShouldExclude(ds))
	return admission.Patched("", ops...)
}

// changes returns the JSON patch from before to after, both as this
// agent's types see them: it touches only what Reconcile changed, so the
// fields of the object that these types do not know (a newer API server's)
// are kept, where a patch from the request's raw object would remove them.
func changes(before, after *appsv1.DaemonSet) ([]jsonpatch.JsonPatchOperation, error) {
	a, err := json.Marshal(before)
	if err != nil {
		return nil, fmt.Errorf("encoding the DaemonSet: %w", err)
	}
	b, err := json.Marshal(after)
	if err != nil {
		return nil, fmt.Errorf("encoding the mutated DaemonSet: %w", err)
	}
	return jsonpatch.CreatePatch(a, b)
}

// failed admits the DaemonSet unchanged, with a warning, and logs err.
func (m *Mutator) failed(log klog.Logger, err error) admission.Response {
	log.Error(err, "Admitting a DaemonSet unchanged")
	return admission.Allowed("").WithWarnings(FailureWarning + ": " + err.Error())
}

// Setup registers the DaemonSet webhook at Path on mgr's webhook server,
// whose certificates the scheduling webhook's CertManager keeps, and the
// controller.
func Setup(mgr manager.Manager, scheme *runtime.Scheme, log klog.Logger) error {
	m := &Mutator{Client: mgr.GetClient(), Logger: log, decoder: admission.NewDecoder(scheme)}
	mgr.GetWebhookServer().Register(Path, &admission.Webhook{Handler: m})
	return (&Reconciler{Client: mgr.GetClient()}).SetupWithManager(mgr)
}
