"""`WordEnum`: enums whose members are the words files store (manifests, tuning files, --precision), so a member
compares, hashes, prints and serializes to JSON as its word while code compares members by identity."""
from __future__ import annotations
from enum import Enum


class WordEnum(str, Enum):
  """An enum of words: `str(member)` and JSON give the word; a member hashes as its word."""

  def __str__(self) -> str: return self.value
  def __hash__(self) -> int: return hash(self.value)
