{{/* Labels every object of the chart carries. */}}
{{- define "offload.labels" -}}
app.kubernetes.io/name: offload
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: kubectl-offload
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Selector labels of one component; call with (dict "ctx" $ "component" "auth"). */}}
{{- define "offload.selectorLabels" -}}
app.kubernetes.io/name: offload
app.kubernetes.io/instance: {{ .ctx.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end }}

{{- define "offload.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag | default .Chart.AppVersion }}
{{- end }}

{{/* The hardened container securityContext of every component. */}}
{{- define "offload.containerSecurityContext" -}}
runAsNonRoot: true
runAsUser: 65532
runAsGroup: 65532
readOnlyRootFilesystem: true
allowPrivilegeEscalation: false
capabilities:
  drop: ["ALL"]
seccompProfile:
  type: RuntimeDefault
{{- end }}

{{/* The cluster ID: the one already installed, else the value, else a new one. */}}
{{- define "offload.clusterID" -}}
{{- $existing := lookup "v1" "ConfigMap" .Release.Namespace "offload-cluster-identity" -}}
{{- if and $existing $existing.data $existing.data.clusterID -}}
{{ $existing.data.clusterID }}
{{- else if .Values.identity.clusterID -}}
{{ .Values.identity.clusterID }}
{{- else -}}
{{ uuidv4 }}
{{- end -}}
{{- end }}

{{/*
How pods of offloaded namespaces get their scheduling tolerations and node
affinity: "policy", a MutatingAdmissionPolicy the API server evaluates
itself (admissionregistration.k8s.io/v1, Kubernetes v1.36 on), or "webhook",
the agent's mutating webhook. webhook.mode "auto" picks the policy where the
API server serves it; kubectl offload install always passes what it chose.
*/}}
{{- define "offload.schedulingMutation" -}}
{{- $served := .Capabilities.APIVersions.Has "admissionregistration.k8s.io/v1/MutatingAdmissionPolicy" -}}
{{- $mode := .Values.webhook.mode | default "auto" -}}
{{- if eq $mode "auto" -}}
{{ ternary "policy" "webhook" $served }}
{{- else -}}
{{ $mode }}
{{- end -}}
{{- end }}

{{/*
CEL for the scheduling policies (scheduling-policy.yaml): the list of
tolerations, or of node selector terms, that the CEL expression in the
argument yields, rebuilt as new maps of one shape, so that they compare
equal whichever object they come from and can be written into a JSON
patch (the API server cannot write values read from the object as they
are). Every map value is dyn: the API server's CEL wants homogeneous
literals.
*/}}
{{- define "offload.celTolerations" -}}
{{ . }}.map(t, {"key": dyn(t.?key.orValue("")), "operator": dyn(t.?operator.orValue("")), "value": dyn(t.?value.orValue("")), "effect": dyn(t.?effect.orValue("")), ?"tolerationSeconds": dyn(t).?tolerationSeconds})
{{- end }}

{{- define "offload.celRequirements" -}}
{{ . }}.map(r, {"key": dyn(r.key), "operator": dyn(r.operator), "values": dyn(r.?values.orValue([]).map(v, string(v)))})
{{- end }}

{{- define "offload.celTerms" -}}
{{ . }}.map(t, {"matchExpressions": dyn({{ include "offload.celRequirements" "t.?matchExpressions.orValue([])" }}), "matchFields": dyn({{ include "offload.celRequirements" "t.?matchFields.orValue([])" }})})
{{- end }}
