{{/* The release's name for objects: <release>-gpureclaim, or the release alone when it holds the chart's name. */}}
{{- define "gpureclaim.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := default .Chart.Name .Values.nameOverride -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{- define "gpureclaim.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpureclaim.exporter.fullname" -}}
{{- printf "%s-exporter" (include "gpureclaim.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpureclaim.reclaimer.fullname" -}}
{{- printf "%s-reclaimer" (include "gpureclaim.fullname" .) | trunc 63 | trimSuffix "-" -}}
{{- end -}}

{{- define "gpureclaim.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/name: {{ include "gpureclaim.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: gpureclaim
{{- with .Values.commonLabels }}
{{ toYaml . }}
{{- end }}
{{- end -}}

{{- define "gpureclaim.selectorLabels" -}}
app.kubernetes.io/name: {{ include "gpureclaim.name" .root }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
app.kubernetes.io/component: {{ .component }}
{{- end -}}

{{- define "gpureclaim.image" -}}
{{- $tag := default .root.Chart.AppVersion .image.tag -}}
{{- if .image.digest -}}
{{- printf "%s@%s" .image.repository .image.digest -}}
{{- else -}}
{{- printf "%s:%s" .image.repository $tag -}}
{{- end -}}
{{- end -}}

{{/* Where the reclaimer finds its secrets. */}}
{{- define "gpureclaim.secretDir" -}}
/etc/gpureclaim/secrets
{{- end -}}

{{/* The reclaimer's configuration: reclaimer.config with the parts the chart owns filled in. */}}
{{- define "gpureclaim.reclaimer.config" -}}
{{- $r := .Values.reclaimer -}}
{{- $dir := include "gpureclaim.secretDir" . -}}
{{- $c := deepCopy $r.config -}}
{{- $_ := set $c "webhook" (merge (dict "bearer_token_file" (printf "%s/webhook/token" $dir)) (default dict $c.webhook)) -}}
{{- $_ := set $c "alertmanager" (merge (dict "url" $r.alertmanagerURL) (default dict $c.alertmanager)) -}}
{{- if .Values.cluster.name -}}
{{- $_ := set $c "cluster" .Values.cluster.name -}}
{{- $_ := set $c "cluster_label" .Values.cluster.label -}}
{{- end -}}
{{- if $r.readSecret.name -}}
{{- $_ := set $c "web" (dict "auth" (dict "bearer_token_file" (printf "%s/read/token" $dir))) -}}
{{- else -}}
{{- $_ := set $c "web" (dict "auth" (dict "none" true)) -}}
{{- end -}}
{{- if $r.adminSecret.name -}}
{{- $_ := set $c "admin_bearer_token_file" (printf "%s/admin/token" $dir) -}}
{{- end -}}
{{- if include "gpureclaim.nodeActionOn" . -}}
{{- $nodes := default dict $c.nodes -}}
{{- $_ := set $nodes "authorization" (dict "credentials_file" (printf "%s/node/token" $dir)) -}}
{{- $_ := set $nodes "kill_grace" .Values.exporter.action.killGrace -}}
{{- if not $nodes.url_template -}}
{{- $_ := set $nodes "url_template" (printf "http://{{ .Node }}:%v" .Values.exporter.action.port) -}}
{{- end -}}
{{- $_ := set $c "nodes" $nodes -}}
{{- end -}}
{{- $k8s := deepCopy (default dict $c.kubernetes) -}}
{{- $_ := set $k8s "kueue" (dict "enabled" $r.kueue) -}}
{{- if $r.jupyterhub.url -}}
{{- $_ := set $k8s "jupyterhub" (dict "url" $r.jupyterhub.url "authorization" (dict "type" "token" "credentials_file" (printf "%s/jupyterhub/token" $dir))) -}}
{{- end -}}
{{- $_ := set $c "kubernetes" $k8s -}}
{{- $off := list -}}
{{- range $name, $on := $r.workloads -}}
{{- if not $on -}}
{{- $off = append $off (dict "name" $name "disabled" true) -}}
{{- end -}}
{{- end -}}
{{- if $off -}}
{{- $_ := set $c "workloads" (concat (default list $c.workloads) $off) -}}
{{- end -}}
{{- if $r.slack.enabled -}}
{{- $slack := merge (dict "token_file" (printf "%s/slack/token" $dir) "signing_secret_file" (printf "%s/slack/signing-secret" $dir)) (deepCopy $r.slack.config) -}}
{{- $_ := set $c "notifiers" (append (default list $c.notifiers) (dict "type" "slack" "slack" $slack)) -}}
{{- end -}}
{{- toYaml $c -}}
{{- end -}}

{{/*
The built-in workload kinds (reclaimer/config/workloads.go, checked by
deploy's tests): API group, resource, and whether it scales.
*/}}
{{- define "gpureclaim.reclaimer.workloadKinds" -}}
deployment: {group: apps, resource: deployments, scale: true}
statefulset: {group: apps, resource: statefulsets, scale: true}
replicaset: {group: apps, resource: replicasets, scale: true}
leaderworkerset: {group: leaderworkerset.x-k8s.io, resource: leaderworkersets, scale: true}
job: {group: batch, resource: jobs}
jobset: {group: jobset.x-k8s.io, resource: jobsets}
raycluster: {group: ray.io, resource: rayclusters}
rayjob: {group: ray.io, resource: rayjobs}
trainjob: {group: trainer.kubeflow.org, resource: trainjobs}
pytorchjob: {group: kubeflow.org, resource: pytorchjobs}
tfjob: {group: kubeflow.org, resource: tfjobs}
mpijob: {group: kubeflow.org, resource: mpijobs}
xgboostjob: {group: kubeflow.org, resource: xgboostjobs}
paddlejob: {group: kubeflow.org, resource: paddlejobs}
jaxjob: {group: kubeflow.org, resource: jaxjobs}
notebook: {group: kubeflow.org, resource: notebooks}
inferenceservice: {group: serving.kserve.io, resource: inferenceservices}
{{- end -}}

{{/*
Whether the chart runs gpureclaim's exporter: on unless the source is
dcgm-exporter (source: dcgm), whose series the rules read instead.
*/}}
{{- define "gpureclaim.exporterOn" -}}
{{- if not (has .Values.source (list "gpureclaim" "dcgm")) -}}
{{- fail (printf "source: %q is not gpureclaim or dcgm" .Values.source) -}}
{{- end -}}
{{- if and .Values.exporter.enabled (eq .Values.source "gpureclaim") -}}true{{- end -}}
{{- end -}}

{{/*
Whether the reclaimer may ask the nodes to end processes: only where
gpureclaim's exporter runs.
*/}}
{{- define "gpureclaim.nodeActionOn" -}}
{{- if and (include "gpureclaim.exporterOn" .) .Values.exporter.action.enabled -}}true{{- end -}}
{{- end -}}
