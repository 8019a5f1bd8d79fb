import { apiHeaders, readClientConfig } from '../lib/map.js';

/** "Mark all as read" on /qc/mine: POST /api/qc/notices/read, then the count of new notices goes. */
export function mountNotices(): void {
  const button = document.getElementById('notices-read') as HTMLButtonElement | null;
  if (!button) return;
  const config = readClientConfig();
  button.addEventListener('click', () => {
    button.disabled = true;
    void fetch(`${config.apiUrl}/api/qc/notices/read`, { method: 'POST', credentials: 'include', headers: apiHeaders(config) }).then((response) => {
      if (!response.ok) {
        button.disabled = false;
        return;
      }
      document.getElementById('notices-unread')!.textContent = '';
      for (const item of document.querySelectorAll('#qc-notices .unread')) item.classList.remove('unread');
      button.parentElement?.remove();
    }, () => (button.disabled = false));
  });
}
