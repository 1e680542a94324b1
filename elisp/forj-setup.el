;;; forj-setup.el --- Setting up a language model provider from a chat  -*- lexical-binding: t; -*-

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

;; `forj-setup' makes a provider usable without writing Elisp: choose a
;; hosted provider and paste its API key, which is stored through
;; auth-source (the first file of `auth-sources', ~/.authinfo.gpg by
;; default; host: the provider's API host, user: "apikey"), or give the
;; URL of a local OpenAI-compatible server (Ollama, llama.cpp, vLLM, LM
;; Studio), which becomes the provider "local" and is asked, in the
;; background, which models it has.  The chat it runs in uses the new
;; provider from its next request on, and so does `forj-provider' for
;; this session (and for later ones, when you say so).

;;; Code:

(require 'cl-lib)
(require 'subr-x)
(require 'auth-source)
(require 'forj-provider)
(require 'forj-models)
(require 'forj-chat)
(require 'forj-session)

(defconst forj-setup--local-choice "local-server"
  "The choice of `forj-setup' that sets up a local server.")

(defcustom forj-setup-local-url "http://127.0.0.1:11434/v1"
  "The URL `forj-setup' proposes for a local server (Ollama's, by default)."
  :type 'string
  :group 'forj)

(defun forj-setup--hosted ()
  "The names of the providers in `forj-providers' that take an API key."
  (cl-loop for (name . plist) in forj-providers
           unless (or (plist-get plist :local) (eq (plist-get plist :family) 'scripted))
           collect name))

;;;###autoload
(defun forj-setup (choice)
  "Set up a language model provider: a hosted one's API key, or a local server.
CHOICE is a provider name of `forj-providers' or the local server
choice; interactively, you choose it, then paste the key (stored
through auth-source) or type the server's URL."
  (interactive
   (list (completing-read (format "Set up which provider (%s: a server on your machine)? "
                                  forj-setup--local-choice)
                          (append (forj-setup--hosted) (list forj-setup--local-choice))
                          nil t)))
  (if (equal choice forj-setup--local-choice)
      (forj-setup-local (read-string (format "URL of the server's OpenAI-compatible API (default %s): "
                                             forj-setup-local-url)
                                     nil nil forj-setup-local-url))
    (forj-setup-key choice (read-passwd (format "API key for %s (stored through auth-source): " choice)))))

(defun forj-setup--say (text)
  "Tell TEXT in the chat, if this is one, else in the echo area."
  (if (derived-mode-p 'forj-chat-mode)
      (forj-session-notice text)
    (message "forj: %s" text)))

(defun forj-setup-key (name key)
  "Store KEY, the API key of the provider NAME, through auth-source, and use NAME.
The entry has host: the provider's API host, user: \"apikey\"."
  (let* ((provider (or (forj-provider-get name)
                       (user-error "No provider named %s in `forj-providers'" name)))
         (host (forj-provider-host (plist-get provider :url)))
         (key (string-trim (or key ""))))
    (when (string-empty-p key) (user-error "No key given; nothing was stored"))
    (unless host (user-error "The provider %s has no URL to store its key under" name))
    (auth-source-forget-all-cached)
    (let ((old (car (auth-source-search :host host :user "apikey" :max 1))))
      (when old
        (let ((secret (plist-get old :secret)))
          (unless (equal (if (functionp secret) (funcall secret) secret) key)
            (user-error "Another key for %s (user apikey) is already in auth-source; change it there, in %s"
                        host (or (plist-get old :source) "your auth-source files"))))))
    (let* ((auth-source-save-behavior t)
           (created (car (auth-source-search :host host :user "apikey" :port "https"
                                             :secret key :create t :max 1)))
           (save (plist-get created :save-function)))
      (when (functionp save) (funcall save)))
    (auth-source-forget-all-cached)
    (unless (equal (forj-provider-key provider) key)
      (user-error "The key could not be stored through auth-source; check `auth-sources'"))
    (forj-setup--use name)
    (forj-setup--say (format "%s is set up: its key is stored through auth-source (host %s, user apikey); model %s.  M-x forj-set-model chooses another."
                             name host (or (plist-get provider :model) "unset")))))

(defun forj-setup-local (url)
  "Use the local OpenAI-compatible server at URL as the provider \"local\".
The server is asked which models it has, in the background; the first
becomes the chat's model, and the chat says which there are."
  (let* ((url (string-remove-suffix "/" (string-trim url)))
         (existing (alist-get "local" forj-providers nil nil #'equal))
         (model (and (equal (plist-get existing :url) url) (plist-get existing :model)))
         (chat (and (derived-mode-p 'forj-chat-mode) (current-buffer))))
    (unless (string-match-p "\\`https?://[^/]+" url)
      (user-error "Give the server's URL, such as %s" forj-setup-local-url))
    (setq forj-providers
          (cons (list "local" :family 'openai :url url :model model :key-env nil :local t)
                (cl-remove "local" forj-providers :key #'car :test #'equal)))
    (forj-setup--use "local")
    (forj-setup--say (format "local server %s: asking it which models it has…" url))
    (forj-models-list
     (forj-provider-get "local")
     (lambda (models why)
       (let ((entry (assoc "local" forj-providers)))
         (when (and models entry (not (plist-get (cdr entry) :model)))
           (setcdr entry (plist-put (copy-sequence (cdr entry)) :model (car models)))))
       (when (buffer-live-p chat)
         (with-current-buffer chat
           (when (equal (plist-get (forj-session-provider forj-session) :name) "local")
             (setf (forj-session-provider forj-session) (forj-provider-get "local"))
             (force-mode-line-update))
           (forj-session-notice
            (if models
                (format "the server at %s has %s; this chat uses %s (M-x forj-set-model chooses another)"
                        url (string-join models ", ") (plist-get (forj-session-provider forj-session) :model))
              (format "the server at %s did not list its models (%s).  Start it, then M-x forj-set-model; or M-x forj-setup for another"
                      url why)))))))))

(defun forj-setup--use (name)
  "Use the provider NAME in this chat, if it is one, and as `forj-provider'.
Offer to keep it for later sessions when Emacs has an init file."
  (when (derived-mode-p 'forj-chat-mode)
    (setf (forj-session-provider forj-session) (forj-provider-get name))
    (force-mode-line-update))
  (customize-set-variable 'forj-provider name)
  (when (and user-init-file (not noninteractive)
             (y-or-n-p (format "Use %s in later Emacs sessions too (saves `forj-provider'%s)? "
                               name (if (equal name "local") " and `forj-providers'" ""))))
    (customize-save-variable 'forj-provider name)
    (when (equal name "local") (customize-save-variable 'forj-providers forj-providers))))

(provide 'forj-setup)
;;; forj-setup.el ends here
