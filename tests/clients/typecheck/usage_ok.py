"""Calls a user of the blog client makes: `mypy --strict` accepts every line (test_client_types.py)."""

from __future__ import annotations

from blog_client import BlogPost, Client, Page, User, UserCard, op_ref

client = Client("http://localhost:3000", token=lambda: "a-fresh-token")
uid: int = client.user.create({"email": "ann@example.com", "name": "Ann", "age": 31})
user: User = client.user.get(uid)
name: str = user["name"]
age: int | None = user["age"]
card: UserCard = client.user.card.get(uid)
page: Page[User] = client.user.list(role=["admin", "editor"], age__gte=18, name__prefix="A", sort=["-age", "name"])
cards: Page[UserCard] = client.user.card.list(email="ann@example.com", limit=10, as_of=3)
posts = client.blog_post.list(search="cafe", score__lt=3.5, expand=["author_id:card"], cursor="abc")
first: BlogPost = posts.data[0]
client.user.patch(uid, {"role": "admin"}, if_match=client.user.fetch(uid).etag)
client.user.replace(uid, {"email": "ann@example.com", "name": "Ann"})
client.batch(
    [
        client.user.create_op({"email": "b@example.com", "name": "B"}),
        client.blog_post.create_op({"author_id": op_ref(0), "title": "t", "body": "b", "score": 1}),
    ]
)
live = client.user.card.live_query(role="admin", on_change=lambda records: None)
records: dict[object, UserCard] = live.records()
subscription = client.comment.subscribe(lambda event: None, post_id=1, after=7)
