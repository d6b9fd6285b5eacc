# Kept as a template by this team; it has no placeholders.
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: api
  namespace: argocd
  annotations:
    argocd-image-updater.argoproj.io/image-list: registry.example/shop/api:1.x
    argocd-image-updater.argoproj.io/write-back-method: git
spec:
  source:
    repoURL: REPO_URL
    targetRevision: main
    path: apps/api
    directory: {}
