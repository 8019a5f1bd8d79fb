#!/bin/sh
# /usr/local/bin/k8s-deploy in the webhook image: the webhook server's DEPLOY_SCRIPT on the Kubernetes
# target, which builds a deploy as a Job and sets the site Deployment's image through the Kubernetes API
# (infra/k8s-deploy/main.ts). APP_ROOT is the image's WORKDIR; only tests, which run the compiled files
# from a temporary folder, set it.
exec node "${APP_ROOT:-/app}/infra/k8s-deploy/main.js" "$@"
