"""Tests of the Helm chart, the images' Dockerfiles and the examples."""
