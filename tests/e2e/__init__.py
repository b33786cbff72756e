"""Both parties together, the CLI, the client, the demo, the contract documents and the deployment."""
