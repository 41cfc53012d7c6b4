{{/* The chart name, or nameOverride. */}}
{{- define "dispatch-reconciler.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* The release's full name: fullnameOverride, or <release>-<chart> (the release alone
when it already contains the chart name). */}}
{{- define "dispatch-reconciler.fullname" -}}
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

{{/* Cluster-scoped objects are shared by every namespace: add the release namespace. */}}
{{- define "dispatch-reconciler.clusterName" -}}
{{- printf "%s-%s" (include "dispatch-reconciler.fullname" .) .Release.Namespace | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "dispatch-reconciler.selectorLabels" -}}
app.kubernetes.io/name: {{ include "dispatch-reconciler.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{- define "dispatch-reconciler.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{ include "dispatch-reconciler.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{- define "dispatch-reconciler.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "dispatch-reconciler.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- default "default" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{- define "dispatch-reconciler.leaseName" -}}
{{- default (include "dispatch-reconciler.fullname" .) .Values.leaderElection.leaseName }}
{{- end }}

{{/* The Secret holding the repo credentials ("" when there are none). */}}
{{- define "dispatch-reconciler.repoSecretName" -}}
{{- $c := .Values.repo.credentials }}
{{- if ne $c.type "none" }}
{{- default (printf "%s-repo" (include "dispatch-reconciler.fullname" .)) $c.existingSecret }}
{{- end }}
{{- end }}

{{/* The Secret holding one remote cluster's kubeconfig. */}}
{{- define "dispatch-reconciler.clusterSecretName" -}}
{{- $root := index . 0 }}{{- $cluster := index . 1 }}
{{- default (printf "%s-cluster-%s" (include "dispatch-reconciler.fullname" $root) $cluster.name | trunc 63 | trimSuffix "-") $cluster.existingSecret }}
{{- end }}
