/* global self, caches */
// The service worker: keeps the app shell so the site opens with no network (docs/web.md, "Offline editing").
// - Pages (navigations): network first, the last copy from the cache when the network fails, and the
//   offline page (/offline) for a page never visited. Pages carry the visitor's session and stay in this
//   browser's own cache only.
// - Built assets (/_astro/, hashed names): cache first; other files of this origin: network first.
// - Requests to other origins (the API, tiles) are not touched: feature data lives in IndexedDB and the
//   outbox talks to the API itself.
const CACHE = 'fp-shell-v1';
const OFFLINE_PAGE = '/offline';

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.add(new Request(OFFLINE_PAGE, { credentials: 'include' }))).then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(
    caches
      .keys()
      .then((names) => Promise.all(names.filter((name) => name !== CACHE).map((name) => caches.delete(name))))
      .then(() => self.clients.claim()),
  );
});

const pageKey = (url) => url.origin + url.pathname;

self.addEventListener('fetch', (event) => {
  const request = event.request;
  if (request.method !== 'GET') return;
  const url = new URL(request.url);
  if (url.origin !== self.location.origin) return;
  const immutable = url.pathname.startsWith('/_astro/');
  if (request.mode === 'navigate' || !immutable) {
    // Network first: a page (or an unhashed file) must not stay stale once the network is back.
    const key = request.mode === 'navigate' ? pageKey(url) : request;
    event.respondWith(
      fetch(request)
        .then((response) => {
          if (response.ok) {
            const copy = response.clone();
            void caches.open(CACHE).then((cache) => cache.put(key, copy));
          }
          return response;
        })
        .catch(async () => {
          const cache = await caches.open(CACHE);
          const fallback = request.mode === 'navigate' ? await cache.match(self.location.origin + OFFLINE_PAGE) : undefined;
          return (await cache.match(key)) ?? fallback ?? Response.error();
        }),
    );
    return;
  }
  event.respondWith(
    caches.open(CACHE).then(async (cache) => {
      const cached = await cache.match(request);
      if (cached) return cached;
      const response = await fetch(request);
      if (response.ok) void cache.put(request, response.clone());
      return response;
    }),
  );
});
