"""Developer scripts: the e2e control plane (e2e/), and deploy/*.yaml rendered from the Helm chart."""
