"""What tests share: scripted fakes, stand-in servers, tiny models written in the test, helpers."""
