"""An example extension of the Standard Agents platform: its tools are in :mod:`.tools`."""
