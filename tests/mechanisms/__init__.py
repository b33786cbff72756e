"""The mechanism library and the shared math (labeldp.mechanisms, labeldp.scale,
labeldp.semi_sensitive), checked against independent math."""
