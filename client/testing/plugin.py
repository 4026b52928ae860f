"""The pytest plugin kafkakit registers through the ``pytest11`` entry point.

It is being built (issue 12); until then it adds nothing to a pytest session.
"""
