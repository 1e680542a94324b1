;;; forj-permissions.el --- A chat's permission mode, and the grants in force  -*- lexical-binding: t; -*-

;; Copyright (C) 2026 The forj authors

;; This program is free software; you can redistribute it and/or modify
;; it under the terms of the GNU General Public License as published by
;; the Free Software Foundation, either version 3 of the License, or
;; (at your option) any later version.

;; This program is distributed in the hope that it will be useful,
;; but WITHOUT ANY WARRANTY; without even the implied warranty of
;; MERCHANTABILITY or FITNESS FOR A PARTICULAR PURPOSE.  See the
;; GNU General Public License for more details.

;; You should have received a copy of the GNU General Public License
;; along with this program.  If not, see <https://www.gnu.org/licenses/>.

;;; Commentary:

;; Consent is decided by the worker, in one order: deny rules, the
;; [[rules]] of the configuration, forced reviews, ask rules, standing
;; grants, allow rules, then the permission mode.  This file is the
;; Emacs side of the two parts a user changes while working:
;;
;; `forj-set-mode' sets the permission mode of one chat (read-only,
;; ask, accept-edits, auto).  The mode travels with every plan and tool
;; list request of that chat, so two chats of one project can work in
;; different modes; the tools the model is shown come from the worker
;; for that mode (a read-only chat is never offered a tool that writes).
;;
;; `forj-permissions' lists what is in force for a chat: its mode, the
;; rules of the configuration files, and the standing grants given in
;; reviews (this chat's, and the project's), with their scope, rule,
;; expiry and whether they cover network access.  `k' revokes the
;; grant at point.

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'forj)
(require 'forj-epc)
(require 'forj-worker)
(require 'forj-tools)
(require 'forj-review)
(require 'forj-chat)
(require 'forj-session)

(defconst forj-permissions--modes '("read-only" "ask" "accept-edits" "auto")
  "The permission modes, strictest first, when the worker has not said.")

(defvar-local forj-permissions--chat nil
  "The chat this permissions buffer is about.")

(defun forj-permissions--chat ()
  "The chat buffer the current command is about, or signal."
  (cond ((derived-mode-p 'forj-chat-mode) (current-buffer))
        ((and (derived-mode-p 'forj-permissions-mode) (buffer-live-p forj-permissions--chat))
         forj-permissions--chat)
        (t (user-error "Not in a forj chat; open one with M-x forj"))))

(defun forj-permissions--summary (chat)
  "The `permissions' part of the hello of CHAT's worker, or nil."
  (with-current-buffer chat
    (plist-get (forj-session-hello) :permissions)))

(defun forj-permissions--read-mode (chat)
  "Ask for a permission mode of CHAT, its current mode marked."
  (let* ((summary (forj-permissions--summary chat))
         (modes (or (append (plist-get summary :modes) nil) forj-permissions--modes))
         (current (with-current-buffer chat (forj-session-permission-mode)))
         (auto-allowed (eq (plist-get summary :auto_allowed) t))
         (annotate (lambda (mode)
                     (concat (and (equal mode current) "  (current)")
                             (and (equal mode "auto") summary (not auto-allowed)
                                  "  (your own config file does not enable it: you get accept-edits)")))))
    (completing-read (format "Permission mode of this chat (now %s): " current)
                     (lambda (string predicate action)
                       (if (eq action 'metadata)
                           `(metadata (annotation-function . ,annotate))
                         (complete-with-action action modes string predicate)))
                     nil t nil nil current)))

;;;###autoload
(defun forj-set-mode (mode)
  "Set the permission mode of this chat to MODE, from its next request on.
MODE is one of the worker's modes: \"read-only\" (only tools without
side effects are offered and run), \"ask\" (every side-effecting call
is reviewed), \"accept-edits\" (file edits inside the project apply
without review; commands are still reviewed) or \"auto\" (everything
the rules allow runs; only when your own configuration file enables
it).  The mode holds for this chat only, and goes with every plan and
tool list request it makes; the header line shows it."
  (interactive (list (forj-permissions--read-mode (forj-permissions--chat))))
  (let* ((chat (forj-permissions--chat))
         (summary (forj-permissions--summary chat))
         (modes (or (append (plist-get summary :modes) nil) forj-permissions--modes)))
    (unless (member mode modes)
      (user-error "Unknown permission mode `%s'; choose one of %s" mode (string-join modes ", ")))
    (with-current-buffer chat
      (setq forj-tools-permission-mode mode)
      (force-mode-line-update)
      (let ((worker (and (forj-session-root forj-session) (forj-worker-get (forj-session-root forj-session)))))
        ;; The tool list follows at once; without a worker, the next send
        ;; asks for it.
        (when (and worker (forj-worker-hello worker)) (forj-loop-load-tools worker))))
    (message "forj: permission mode of this chat: %s" mode)
    (forj-permissions--refresh-for chat)
    mode))

;;; The permissions buffer

(defface forj-permissions-heading
  '((t :inherit bold))
  "Face for the headings of the permissions buffer."
  :group 'forj)

(defvar-local forj-permissions--grants nil
  "The grants in force, as the worker listed them, or the symbol `loading'.")

(defvar-local forj-permissions--error nil
  "Why the grants could not be listed, or nil.")

(defvar forj-permissions-mode-map
  (let ((map (make-sparse-keymap)))
    (define-key map "k" #'forj-permissions-revoke)
    (define-key map "d" #'forj-permissions-revoke)
    (define-key map "m" #'forj-set-mode)
    (define-key map "g" #'forj-permissions-refresh)
    (define-key map "n" #'forj-permissions-next)
    (define-key map "p" #'forj-permissions-previous)
    map)
  "Keymap of `forj-permissions-mode'.")

(define-derived-mode forj-permissions-mode special-mode "forj-permissions"
  "The permissions in force for a chat: its mode, the rules, the grants.

\\{forj-permissions-mode-map}"
  (setq-local revert-buffer-function (lambda (&rest _) (forj-permissions-refresh))))

;;;###autoload
(defun forj-permissions ()
  "Show the permissions in force for this chat, and revoke grants.
The buffer lists the chat's permission mode, the rules of the
configuration files, and the standing grants (this chat's and the
project's) with their scope, rule, expiry and network access;
\\<forj-permissions-mode-map>\\[forj-permissions-revoke] revokes the grant at point, \\[forj-set-mode] sets the mode, \\[forj-permissions-refresh] lists again."
  (interactive)
  (let* ((chat (forj-permissions--chat))
         (root (or (forj-session-root (buffer-local-value 'forj-session chat))
                   (user-error "This chat has no project")))
         (buffer (get-buffer-create
                  (format "*forj-permissions: %s*" (file-name-nondirectory (directory-file-name root))))))
    (with-current-buffer buffer
      (unless (derived-mode-p 'forj-permissions-mode) (forj-permissions-mode))
      (setq forj-permissions--chat chat))
    (pop-to-buffer buffer)
    (forj-permissions-refresh)
    buffer))

(defun forj-permissions--refresh-for (chat)
  "Redraw the permissions buffer of CHAT, if one is open."
  (dolist (buffer (buffer-list))
    (when (and (eq (buffer-local-value 'major-mode buffer) 'forj-permissions-mode)
               (eq (buffer-local-value 'forj-permissions--chat buffer) chat))
      (with-current-buffer buffer (forj-permissions-refresh)))))

(defun forj-permissions-refresh ()
  "Ask the worker for the grants in force again, and redraw."
  (interactive)
  (let ((buffer (current-buffer))
        (chat forj-permissions--chat))
    (unless (buffer-live-p chat) (user-error "The chat of this buffer is gone"))
    (setq forj-permissions--grants 'loading
          forj-permissions--error nil)
    (forj-permissions--render)
    (forj-worker-ensure
     (forj-session-root (buffer-local-value 'forj-session chat))
     (lambda (worker)
       (forj-epc-call (forj-worker-connection worker) "grants"
                      (list :session (with-current-buffer chat (forj-tools-session-id)))
                      :success (lambda (reply)
                                 (when (buffer-live-p buffer)
                                   (with-current-buffer buffer
                                     (setq forj-permissions--grants (append (plist-get reply :grants) nil))
                                     (forj-permissions--render))))
                      :error (lambda (err) (forj-permissions--failed buffer err))))
     (lambda (err) (forj-permissions--failed buffer err)))))

(defun forj-permissions--failed (buffer err)
  "Show in BUFFER that the grants could not be listed: ERR."
  (when (buffer-live-p buffer)
    (with-current-buffer buffer
      (setq forj-permissions--grants nil
            forj-permissions--error (or (plist-get err :message) (format "%s" err)))
      (forj-permissions--render))))

(defun forj-permissions--heading (text)
  "Insert TEXT as a heading line."
  (insert (propertize text 'face 'forj-permissions-heading) "\n"))

(defun forj-permissions--time (seconds)
  "SECONDS since the epoch as a local date and time."
  (format-time-string "%Y-%m-%d %H:%M" (seconds-to-time seconds)))

(defun forj-permissions--expiry (grant)
  "When GRANT ends, in words."
  (let ((expires (plist-get grant :expires_at)))
    (cond ((numberp expires) (concat "until " (forj-permissions--time expires)))
          ((equal (plist-get grant :scope) "project") "until revoked")
          (t "while the worker runs"))))

(defun forj-permissions--scope (grant)
  "GRANT's scope, in words."
  (pcase (plist-get grant :scope)
    ("project" "project")
    ("minutes" "this chat, timed")
    ("session" "this chat")
    (scope (format "%s" scope))))

(defun forj-permissions--rule-text (rule)
  "A [[rules]] RULE (a plist) as one line: its type, then its fields."
  (concat (format "%s" (plist-get rule :type))
          (cl-loop for (key value) on rule by #'cddr
                   unless (eq key :type)
                   concat (format " %s=%s" (substring (symbol-name key) 1)
                                  (if (vectorp value)
                                      (mapconcat (lambda (v) (format "%s" v)) value ",")
                                    value)))))

(defun forj-permissions--render ()
  "Draw the permissions buffer from the chat's hello and the grants."
  (let* ((inhibit-read-only t)
         (chat forj-permissions--chat)
         (line (line-number-at-pos))
         (hello (and (buffer-live-p chat) (with-current-buffer chat (forj-session-hello))))
         (summary (plist-get hello :permissions))
         (config (plist-get hello :config))
         (effective (plist-get config :effective))
         (permissions (plist-get effective :permissions)))
    (erase-buffer)
    (insert (substitute-command-keys
             "\\<forj-permissions-mode-map>\\[forj-permissions-revoke] revoke the grant at point, \\[forj-set-mode] set the chat's mode, \\[forj-permissions-refresh] list again, \\[quit-window] quit.\n\n"))
    (forj-permissions--heading (format "Chat %s" (if (buffer-live-p chat) (buffer-name chat) "(gone)")))
    (when (buffer-live-p chat)
      (insert (format "  mode: %s" (with-current-buffer chat (forj-session-permission-mode)))
              (if (buffer-local-value 'forj-tools-permission-mode chat)
                  (format "  (set for this chat; the configured default is %s)"
                          (or (plist-get summary :mode) "unknown until the worker starts"))
                "  (the configured default)")
              "\n"))
    (when summary
      (let ((timeout (plist-get summary :permission_timeout_seconds)))
        (insert (format "  review timeout: %s\n"
                        (if (and (numberp timeout) (> timeout 0))
                            (format "%s s, then the review is a denial" timeout)
                          "none (a review waits for you)"))))
      (insert (format "  auto mode: %s\n"
                      (if (eq (plist-get summary :auto_allowed) t)
                          "allowed by your own config file"
                        "not enabled (only your own config file can enable it)"))))
    (insert "\n")
    (forj-permissions--heading "Configuration files")
    (if (null config)
        (insert "  (the worker has not started yet; g lists again)\n")
      (insert (format "  yours: %s\n" (let ((f (plist-get config :user_file))) (if (stringp f) f "none")))
              (format "  the project's: %s%s\n"
                      (let ((f (plist-get config :project_file))) (if (stringp f) f "none"))
                      (if (eq (plist-get config :trusted) t) " (trusted)" ""))))
    (insert "\n")
    (forj-permissions--heading "Permission rules ([permissions]; deny > ask > allow > mode)")
    (let ((any nil))
      (dolist (kind '(:deny :ask :allow :network))
        (dolist (rule (append (plist-get permissions kind) nil))
          (setq any t)
          (insert (format "  %-8s " (substring (symbol-name kind) 1))
                  (forj-review-visible-text rule) "\n")))
      (unless any (insert "  (none: the mode decides)\n")))
    (insert "\n")
    (forj-permissions--heading "Rules ([[rules]])")
    (let ((rules (append (plist-get effective :rules) nil)))
      (if (null rules)
          (insert "  (none)\n")
        (dolist (rule rules)
          (insert "  " (forj-review-visible-text (forj-permissions--rule-text rule)) "\n"))))
    (let ((instructions (append (plist-get summary :instructions) nil)))
      (when instructions
        (insert "  the model is told:\n")
        (dolist (sentence instructions)
          (insert "    " (forj-review-visible-text sentence) "\n"))))
    (insert "\n")
    (forj-permissions--heading "Standing grants (this chat's and the project's)")
    (cond
     (forj-permissions--error
      (insert "  could not list them: " forj-permissions--error "\n"))
     ((eq forj-permissions--grants 'loading)
      (insert "  asking the worker…\n"))
     ((null forj-permissions--grants)
      (insert "  (none: give one with s, m or ! in a review)\n"))
     (t
      (insert (format "  %-17s %-26s %-22s %-7s %s\n" "scope" "rule" "expires" "network" "id"))
      (dolist (grant forj-permissions--grants)
        (let ((start (point)))
          (insert (format "  %-17s %-26s %-22s %-7s %s\n"
                          (forj-permissions--scope grant)
                          (forj-review-visible-text (or (plist-get grant :rule) ""))
                          (forj-permissions--expiry grant)
                          (if (eq (plist-get grant :network) t) "yes" "no")
                          (plist-get grant :id)))
          (put-text-property start (point) 'forj-permissions-grant grant)))))
    (goto-char (point-min))
    (forward-line (1- line))))

(defun forj-permissions--grant-at-point ()
  "The grant on this line, or signal."
  (or (get-text-property (line-beginning-position) 'forj-permissions-grant)
      (user-error "No grant on this line")))

(defun forj-permissions-revoke (id)
  "Revoke the standing grant ID (interactively, the one at point).
Calls it covered are reviewed again from the next one on."
  (interactive
   (let ((grant (forj-permissions--grant-at-point)))
     (unless (y-or-n-p (format "Revoke the grant %s (%s)? " (plist-get grant :rule)
                               (forj-permissions--scope grant)))
       (user-error "Not revoked"))
     (list (plist-get grant :id))))
  (let ((buffer (current-buffer))
        (chat forj-permissions--chat))
    (unless (buffer-live-p chat) (user-error "The chat of this buffer is gone"))
    (forj-worker-ensure
     (forj-session-root (buffer-local-value 'forj-session chat))
     (lambda (worker)
       (forj-epc-call (forj-worker-connection worker) "revoke_grant" (list :id id)
                      :success (lambda (_)
                                 (message "forj: grant %s revoked" id)
                                 (when (buffer-live-p buffer)
                                   (with-current-buffer buffer (forj-permissions-refresh))))
                      :error (lambda (err)
                               (message "forj: could not revoke %s: %s" id
                                        (or (plist-get err :message) err))
                               (when (buffer-live-p buffer)
                                 (with-current-buffer buffer (forj-permissions-refresh))))))
     (lambda (err) (message "forj: could not revoke %s: %s" id (or (plist-get err :message) err))))))

(defun forj-permissions-next ()
  "Move to the next grant."
  (interactive)
  (let ((pos (next-single-property-change (line-end-position) 'forj-permissions-grant)))
    (when pos (goto-char pos))))

(defun forj-permissions-previous ()
  "Move to the previous grant."
  (interactive)
  (let ((pos (previous-single-property-change (line-beginning-position) 'forj-permissions-grant)))
    (when pos
      (goto-char pos)
      (unless (get-text-property (point) 'forj-permissions-grant)
        (let ((start (previous-single-property-change (point) 'forj-permissions-grant)))
          (when start (goto-char start)))))
    (forward-line 0)))

(provide 'forj-permissions)
;;; forj-permissions.el ends here
