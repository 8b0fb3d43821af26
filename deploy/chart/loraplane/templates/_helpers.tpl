{{/*
Helm's own labels, on the top-level metadata of every object. test/chart ignores exactly
these when it compares the chart with deploy/default.
*/}}
{{- define "loraplane.helmLabels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}

{{/* Labels of a controller's objects: (dict "root" $ "name" "adapter-controller"). */}}
{{- define "loraplane.labels" -}}
app.kubernetes.io/name: {{ .name }}
app.kubernetes.io/part-of: loraplane
{{ include "loraplane.helmLabels" .root }}
{{- end }}

{{/* The controllers this release installs: name → values, in a stable order. */}}
{{- define "loraplane.controllers" -}}
{{- $out := list -}}
{{- if .Values.adapterController.enabled }}{{ $out = append $out (dict "name" "adapter-controller" "values" .Values.adapterController) }}{{ end -}}
{{- if .Values.routerController.enabled }}{{ $out = append $out (dict "name" "router-controller" "values" .Values.routerController) }}{{ end -}}
{{- toJson $out -}}
{{- end }}

{{/* The image of a controller: (dict "root" $ "name" ... "values" ...). */}}
{{- define "loraplane.image" -}}
{{- $repo := .values.image.repository | default (printf "%s/%s" .root.Values.image.registry .name) -}}
{{- $tag := .values.image.tag | default .root.Values.image.tag | default .root.Chart.AppVersion -}}
{{- with .values.image.digest }}{{ printf "%s:%s@%s" $repo $tag . }}{{ else }}{{ printf "%s:%s" $repo $tag }}{{ end -}}
{{- end }}

{{/*
The arguments of a controller: its flags map plus the ports and --watch-namespace, as
--name=value in name order (true: --name; null or "": left out; a list: joined with commas),
then extraArgs.
*/}}
{{- define "loraplane.args" -}}
{{- $flags := dict -}}
{{- range $k, $v := .values.flags }}{{ $_ := set $flags $k $v }}{{ end -}}
{{- $_ := set $flags "metrics-bind-address" (printf ":%v" .values.metricsPort) -}}
{{- $_ := set $flags "health-probe-bind-address" (printf ":%v" .values.healthPort) -}}
{{- with .root.Values.watchNamespaces }}{{ $_ := set $flags "watch-namespace" (join "," .) }}{{ end -}}
{{- range $k, $v := $flags }}
{{- if kindIs "bool" $v }}
{{- if $v }}
- --{{ $k }}
{{- else }}
- --{{ $k }}=false
{{- end }}
{{- else if kindIs "slice" $v }}
{{- if $v }}
- {{ printf "--%s=%s" $k (join "," $v) | quote }}
{{- end }}
{{- else if not (or (kindIs "invalid" $v) (eq (toString $v) "")) }}
- {{ printf "--%s=%s" $k (toString $v) | quote }}
{{- end }}
{{- end }}
{{- range .values.extraArgs }}
- {{ . | quote }}
{{- end }}
{{- end }}

{{/*
The generated rules (files/<name>-role.yaml, copied from deploy/<name>/rbac by
`make manifests`) of one kind: (dict "root" $ "name" ... "kind" "ClusterRole"|"Role"
"scope" "all"|"cluster"|"namespaced" ["namespace" ...]). "cluster" keeps the rules on
cluster-scoped resources (TokenReviews, SubjectAccessReviews) and the read of AIBrix's Leases
(leases by name: those live in AIBrix's namespace, which a namespaced install does not watch),
"namespaced" the others. A Role is picked by the namespace its markers name: "namespace",
default loraplane-system (leader election; the router's HTTPRoute Role names aibrix-system,
the default gateway namespace).
*/}}
{{- define "loraplane.rules" -}}
{{- $rules := list -}}
{{- range $doc := splitList "---\n" ($.root.Files.Get (printf "files/%s-role.yaml" $.name)) }}
{{- $o := fromYaml $doc }}
{{- if and (eq (toString (get $o "kind")) $.kind) (or (ne $.kind "Role") (eq (toString (dig "metadata" "namespace" "" $o)) ($.namespace | default "loraplane-system"))) }}
{{- range $r := $o.rules }}
{{- $cluster := or (has "authentication.k8s.io" $r.apiGroups) (has "authorization.k8s.io" $r.apiGroups) (and (has "coordination.k8s.io" $r.apiGroups) $r.resourceNames) }}
{{- if or (eq $.scope "all") (and $cluster (eq $.scope "cluster")) (and (not $cluster) (eq $.scope "namespaced")) }}
{{- $rules = append $rules $r }}
{{- end }}
{{- end }}
{{- end }}
{{- end }}
{{- toYaml $rules }}
{{- end }}

{{/* The router's gateway namespace. */}}
{{- define "loraplane.gatewayNamespace" -}}
{{- index .Values.routerController.flags "gateway-namespace" | default "aibrix-system" -}}
{{- end }}

{{/* Namespaces a controller needs a Role in, for a namespaced install. */}}
{{- define "loraplane.roleNamespaces" -}}
{{- $ns := .root.Values.watchNamespaces -}}
{{- if eq .name "router-controller" }}{{ $ns = append $ns (include "loraplane.gatewayNamespace" .root) }}{{ end -}}
{{- toJson (uniq $ns) -}}
{{- end }}

{{/*
The release's full name: fullnameOverride, else the release name when it contains the chart's
name (or nameOverride), else <release>-<name>. Cluster-scoped objects are named after it.
*/}}
{{- define "loraplane.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- $name := .Values.nameOverride | default .Chart.Name -}}
{{- if contains $name .Release.Name -}}
{{- .Release.Name | trunc 63 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}
{{- end }}

{{/* The name of a release-scoped object: (dict "root" $ "name" "adapter-controller"). */}}
{{- define "loraplane.scopedName" -}}
{{- printf "%s-%s" (include "loraplane.fullname" .root) .name | trunc 63 | trimSuffix "-" -}}
{{- end }}

{{/* A controller's ServiceAccount: (dict "root" $ "name" ... "values" ...). */}}
{{- define "loraplane.serviceAccountName" -}}
{{- .values.serviceAccount.name | default .name -}}
{{- end }}

{{/*
A controller's affinity: its values' affinity, else with 2 or more replicas a preferred pod
anti-affinity on the node (replicas on different nodes where possible).
*/}}
{{- define "loraplane.affinity" -}}
{{- if .values.affinity -}}
{{- toYaml .values.affinity -}}
{{- else if ge (int .values.replicas) 2 -}}
podAntiAffinity:
  preferredDuringSchedulingIgnoredDuringExecution:
  - weight: 100
    podAffinityTerm:
      topologyKey: kubernetes.io/hostname
      labelSelector:
        matchLabels: {app.kubernetes.io/name: {{ .name }}}
{{- end -}}
{{- end }}
