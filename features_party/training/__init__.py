"""Training on noisy labels: join by example ID, fit, debias, evaluate, export."""
