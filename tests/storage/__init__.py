"""Tests of magnetar.storage."""
