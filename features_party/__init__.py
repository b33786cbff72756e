"""The features party (publisher): receives releases, joins them to features, trains and serves."""
