"""The Textual chat app. Widgets talk to the engine only through messages posted from its worker thread."""
