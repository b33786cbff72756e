"""The labels party (advertiser): holds raw labels, spends privacy budget, releases noisy labels."""
