"""The reference implementations of the systems under test, one package each (``reference.copilot``,
``reference.jobs``). A reference imports only ``kernel``, never a shell or another system."""
