"""Calls the blog client's types refuse: mypy --strict reports each line marked `# E:` and no other."""

from __future__ import annotations

from blog_client import Client, User

client = Client("http://localhost:3000")
client.user.list(age=31)  # E: Unexpected keyword argument "age"
client.user.list(role="owner")  # E: incompatible type
client.user.list(email=3)  # E: incompatible type
client.user.list(sort="email")  # E: incompatible type
client.user.list(search="ann")  # E: Unexpected keyword argument "search"
client.user.get("1")  # E: incompatible type
client.user.create({"email": "ann@example.com"})  # E: Missing key "name"
client.user.create({"email": "a@example.com", "name": "A", "age": "31"})  # E: item "age" has type "int | None"
client.user.patch(1, {"nick": "A"})  # E: Extra key "nick"
client.blog_post.list(expand="title")  # E: incompatible type
client.user.subscribe(print, limit=10)  # E: Unexpected keyword argument "limit"
user: User = client.user.card.get(1)  # E: Incompatible types in assignment
_ = client.user.summary  # E: has no attribute "summary"
