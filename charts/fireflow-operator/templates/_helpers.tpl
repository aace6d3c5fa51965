{{/*
The chart name, or nameOverride; used in the app.kubernetes.io/name label.
*/}}
{{- define "fireflow-operator.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
The full name of every resource: fullnameOverride, else "<release>-<name>" (just the release name when it
already contains the chart name). Truncated to 63 characters, the limit of a DNS label.
*/}}
{{- define "fireflow-operator.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
"<chart>-<version>" for the helm.sh/chart label.
*/}}
{{- define "fireflow-operator.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels of every object the chart creates.
*/}}
{{- define "fireflow-operator.labels" -}}
helm.sh/chart: {{ include "fireflow-operator.chart" . }}
{{ include "fireflow-operator.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: fireflow
{{- end }}

{{/*
The only labels a selector uses: stable for the life of the release.
*/}}
{{- define "fireflow-operator.selectorLabels" -}}
app.kubernetes.io/name: {{ include "fireflow-operator.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
The operator's ServiceAccount.
*/}}
{{- define "fireflow-operator.serviceAccountName" -}}
{{- default (include "fireflow-operator.fullname" .) .Values.serviceAccount.name }}
{{- end }}

{{/*
The operator image: by digest when one is given, else by tag (default: the chart's appVersion).
*/}}
{{- define "fireflow-operator.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
The namespace the sample in NOTES.txt uses: the first watched namespace, else the release namespace.
*/}}
{{- define "fireflow-operator.sampleNamespace" -}}
{{- if .Values.watchNamespaces }}
{{- first .Values.watchNamespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/*
Every rule the operator needs inside a namespace it watches, from what it calls (operator/fireflow_operator:
reconcile.py, kube.py, handlers.py) and what kopf does for it. The same list goes into the ClusterRole
(cluster-wide mode) and into each Role (watchNamespaces mode).
*/}}
{{- define "fireflow-operator.namespacedRules" -}}
# Pools: kopf watches them and patches their metadata (finalizer, progress annotations); the operator reads them.
- apiGroups: ["fireflow.persistent.ai"]
  resources: ["fireflowworkerpools"]
  verbs: ["get", "list", "watch", "patch"]
# The operator writes phase, conditions and replica counts through the status subresource.
- apiGroups: ["fireflow.persistent.ai"]
  resources: ["fireflowworkerpools/status"]
  verbs: ["get", "patch", "update"]
# Children carry an ownerReference with blockOwnerDeletion, which needs this where the
# OwnerReferencesPermissionEnforcement admission plugin is on.
- apiGroups: ["fireflow.persistent.ai"]
  resources: ["fireflowworkerpools/finalizers"]
  verbs: ["update"]
# The workers: a StatefulSet per application version, an old one deleted once the database shows none of its
# runs left; scaled to zero (a patch of spec.replicas, never /scale) when the pool is deleted.
- apiGroups: ["apps"]
  resources: ["statefulsets"]
  verbs: ["get", "list", "watch", "create", "update", "patch", "delete"]
# The pool's headless Service.
- apiGroups: [""]
  resources: ["services"]
  verbs: ["get", "list", "watch", "create"]
# The pool's PodDisruptionBudget, updated with spec.podDisruptionBudget, removed below two replicas.
- apiGroups: ["policy"]
  resources: ["poddisruptionbudgets"]
  verbs: ["get", "list", "watch", "create", "patch", "delete"]
# Migration plan/apply Jobs, deleted once their outcome is in the pool's status (the newest failed one
# stays for its logs); listed across pools so that one apply runs at a time per database.
- apiGroups: ["batch"]
  resources: ["jobs"]
  verbs: ["get", "list", "watch", "create", "delete"]
# The pool's optional NetworkPolicy (spec.networkPolicy), replaced when the spec changes, deleted when off.
- apiGroups: ["networking.k8s.io"]
  resources: ["networkpolicies"]
  verbs: ["get", "create", "update", "delete"]
# Worker and migration pods: watched, and read for termination messages.
- apiGroups: [""]
  resources: ["pods"]
  verbs: ["get", "list", "watch"]
# The database URL named by spec.database.secretRef (read one by one, never listed), and the operator's own
# copy of it, <pool>-connection, which keeps a finalizer until the pool's runs were handed back.
- apiGroups: [""]
  resources: ["secrets"]
  verbs: ["get", "create", "patch", "delete"]
# Events on pools (kopf posts core/v1 Events); FailedCreate events of the pool's StatefulSet and Jobs are
# read to say why their pods do not exist.
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create", "patch", "list"]
- apiGroups: ["events.k8s.io"]
  resources: ["events"]
  verbs: ["create", "patch"]
{{- end }}

{{/*
Checks across values that values.schema.json cannot express; each fails with one line naming the values.
*/}}
{{- define "fireflow-operator.validate" -}}
{{- if and .Values.metrics.enabled (eq (int .Values.metrics.port) (int .Values.operator.healthPort)) }}
{{- fail (printf "metrics.port and operator.healthPort must differ (both are %d): kopf's liveness endpoint and the metrics endpoint cannot share a port" (int .Values.metrics.port)) }}
{{- end }}
{{- if and .Values.metrics.serviceMonitor.enabled (not .Values.metrics.enabled) }}
{{- fail "metrics.serviceMonitor.enabled needs metrics.enabled: there is no metrics endpoint to scrape" }}
{{- end }}
{{- range $key := list "app.kubernetes.io/name" "app.kubernetes.io/instance" }}
{{- if hasKey $.Values.podLabels $key }}
{{- fail (printf "podLabels may not set %s: the Deployment's selector owns it" $key) }}
{{- end }}
{{- end }}
{{- if and (not .Values.serviceAccount.create) (not .Values.serviceAccount.name) }}
{{- fail "serviceAccount.create=false needs serviceAccount.name: the operator's rules would otherwise be bound to the namespace's default ServiceAccount, and every pod there would get them" }}
{{- end }}
{{- range $key, $_ := .Values.podAnnotations }}
{{- if regexMatch "^(container\\.)?(apparmor|seccomp)\\.security\\.(alpha|beta)\\.kubernetes\\.io/" $key }}
{{- fail (printf "podAnnotations may not set %s: choose AppArmor and seccomp profiles with appArmorProfile and seccompProfile in securityContext or podSecurityContext (the restricted Pod Security Standard allows RuntimeDefault and Localhost)" $key) }}
{{- end }}
{{- end }}
{{- if eq .Values.serviceAccount.name "default" }}
{{- fail "serviceAccount.name may not be default: the operator's rules would be bound to the namespace's default ServiceAccount, and every pod there would get them; name an account of its own" }}
{{- end }}
{{- if and .Values.image.digest .Values.image.tag }}
{{- fail "set image.tag or image.digest, not both: the digest alone decides which image runs" }}
{{- end }}
{{- end }}
