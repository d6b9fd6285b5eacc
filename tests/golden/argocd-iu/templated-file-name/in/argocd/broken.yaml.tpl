apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: {{ .name }
